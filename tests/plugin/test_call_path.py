"""Hooks go through pluggy's hook callers: wrappers, hookwrappers and tracing see every call;
observers stay isolated; plugins may implement hooks another plugin declares, in any order."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
from pydantic import BaseModel

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.settings import OmniSettings
from omni_core.errors import PluginError, PluginLoadError
from omni_core.plugin import hookspec
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import Admission, StageKind
from tests.helpers import CHAIN, collect


class Args(BaseModel):
    pass


def kind(name: str) -> StageKind:
    return StageKind(name, lambda *a: None, Args)


def plugin(name: str, **impls: Any) -> types.ModuleType:
    """A plugin module with the given hook impls (functions already marked)."""
    module = types.ModuleType(f"fake_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    for hook, function in impls.items():
        setattr(module, hook, function)
    return module


def kinds_plugin(name: str, *kinds: str) -> types.ModuleType:
    @hookimpl
    def omni_register_stage_kinds():
        return [kind(k) for k in kinds]

    return plugin(name, omni_register_stage_kinds=omni_register_stage_kinds)


def host_with(*plugins: tuple[str, Any], settings: OmniSettings | None = None) -> PluginHost:
    return PluginHost.create(
        settings or OmniSettings(), load_entry_points=False, extra_plugins=list(plugins)
    )


# --- wrappers -------------------------------------------------------------------------------------
def test_a_wrapper_sees_and_changes_a_registration_result_and_providers_stay_named():
    seen: list[list[str]] = []

    @hookimpl(wrapper=True)
    def omni_register_stage_kinds():
        results = yield
        seen.append(sorted(k.name for items in results for k in items))
        # drop kind "b" (rebuilding the list that held it), keep the other impls' lists as they
        # were returned, and add a kind of its own
        kept = [
            items if all(k.name != "b" for k in items) else [k for k in items if k.name != "b"]
            for items in results
        ]
        return [*kept, [kind("from-wrapper")]]

    host = host_with(
        ("one", kinds_plugin("one", "a", "b")),
        ("two", kinds_plugin("two", "c")),
        ("wrap", plugin("wrap", omni_register_stage_kinds=omni_register_stage_kinds)),
    )
    providers = host.stage_kind_providers()
    assert {"a", "b", "c"} <= set(seen[0])
    assert "b" not in providers
    assert providers["c"] == "two"
    assert providers["from-wrapper"] == "<hook wrapper>"
    # a list the wrapper rebuilt is not the impl's own object: attributed to the wrapper
    assert providers["a"] == "<hook wrapper>"


def test_a_wrapper_that_keeps_results_keeps_every_provider_named():
    @hookimpl(wrapper=True)
    def omni_register_stage_kinds():
        return (yield)

    host = host_with(
        ("one", kinds_plugin("one", "a")),
        ("wrap", plugin("wrap", omni_register_stage_kinds=omni_register_stage_kinds)),
    )
    assert host.stage_kind_providers()["a"] == "one"


def test_old_style_hookwrapper_wraps_every_observer_call():
    calls: list[str] = []

    @hookimpl(hookwrapper=True)
    def omni_request_terminal(request_id):
        calls.append(f"before {request_id}")
        outcome = yield
        calls.append(f"after {request_id} ok={outcome.exception is None}")

    @hookimpl(specname="omni_request_terminal")
    def observe(request_id, finish_reason):
        calls.append(f"observer {request_id} {finish_reason}")

    host = host_with(
        ("obs", plugin("obs", omni_request_terminal=observe)),
        ("wrap", plugin("wrap", omni_request_terminal=omni_request_terminal)),
    )
    host.request_terminal("r1", None, "stop", None, port=None)
    assert calls == ["before r1", "observer r1 stop", "after r1 ok=True"]


async def test_a_wrapper_on_the_per_token_observer_sees_every_output_of_a_run(
    fake_entry_points, make_engine
):
    outputs: list[tuple[str, int]] = []

    @hookimpl(wrapper=True)
    def omni_stage_output(request_id, stage_id):
        yield
        outputs.append((request_id, stage_id))

    fake_entry_points.add("wrap", plugin("wrap", omni_stage_output=omni_stage_output))
    engine = make_engine(CHAIN)
    outs = await collect(engine, "hi", request_id="r1")
    assert outs[-1].finished
    # scripted chain: 4 thinker, 6 talker, 3 vocoder tokens, each output observed once
    per_stage = [sum(1 for _, s in outputs if s == stage) for stage in (0, 1, 2)]
    assert per_stage == [4, 6, 3]
    assert {r for r, _ in outputs} == {"r1"}


# --- observers --------------------------------------------------------------------------------------
def test_an_observer_failing_first_is_logged_and_the_next_still_runs(caplog):
    seen: list[str] = []

    @hookimpl
    def good_admitted(request_id):
        seen.append(request_id)

    @hookimpl
    def bad_admitted(request_id):
        raise RuntimeError("observer bug")

    @hookimpl(wrapper=True)
    def wrapped(request_id):
        result = yield  # the failure never reaches a wrapper: it is the observer's own
        seen.append(f"wrapper saw {result!r}")
        return result

    # pluggy calls the last registered impl first: "bad" runs before "good"
    host = host_with(
        ("good", plugin("good", omni_request_admitted=good_admitted)),
        ("bad", plugin("bad", omni_request_admitted=bad_admitted)),
        ("wrap", plugin("wrap", omni_request_admitted=wrapped)),
    )
    with caplog.at_level(logging.ERROR):
        host.request_admitted("r1", None, port=None)
    assert seen == ["r1", "wrapper saw []"]
    assert "plugin 'bad' failed in omni_request_admitted" in caplog.text
    assert "observer bug" in caplog.text


def test_observer_notifications_go_through_pluggy_and_cost_no_call_when_unimplemented():
    calls: list[str] = []

    @hookimpl
    def omni_request_terminal(request_id):
        pass

    bare = host_with()
    observed = host_with(("obs", plugin("obs", omni_request_terminal=omni_request_terminal)))
    for host in (bare, observed):
        host.pm.add_hookcall_monitoring(
            lambda name, impls, kwargs: calls.append(name), lambda *a: None
        )
    bare.stage_output("r1", None, 0, output=None, port=None)  # type: ignore[arg-type]
    bare.request_terminal("r1", None, "stop", None, port=None)
    assert calls == []
    assert not bare.has_output_observers
    observed.stage_output("r1", None, 0, output=None, port=None)  # type: ignore[arg-type]
    observed.request_terminal("r1", None, "stop", None, port=None)
    assert calls == ["omni_request_terminal"]


# --- decisions --------------------------------------------------------------------------------------
def test_admission_failure_names_the_plugin_that_raised():
    @hookimpl
    def ok(request_id):
        return Admission()

    @hookimpl
    def refuses(request_id):
        raise ValueError("no guidance model")

    host = host_with(
        ("ok", plugin("ok", omni_admit_request=ok)),
        ("strict", plugin("strict", omni_admit_request=refuses)),
    )
    with pytest.raises(PluginError, match="plugin 'strict' rejected the request: ValueError"):
        host.admit_request(
            request_id="r1", request=None, prompt="x", pipeline=None, params={}, port=None
        )


def test_admission_of_the_wrong_type_names_the_plugin_that_returned_it():
    @hookimpl
    def ok(request_id):
        return Admission()

    @hookimpl
    def wrong(request_id):
        return "yes"

    host = host_with(
        ("ok", plugin("ok", omni_admit_request=ok)),
        ("wrong", plugin("wrong", omni_admit_request=wrong)),
    )
    with pytest.raises(PluginError, match="plugin 'wrong': omni_admit_request returned str"):
        host.admit_request(
            request_id="r1", request=None, prompt="x", pipeline=None, params={}, port=None
        )


# --- tracing ------------------------------------------------------------------------------------------
def test_trace_hooks_setting_writes_pluggys_trace_to_stderr(monkeypatch, capsys):
    monkeypatch.setenv("OMNI_TRACE_HOOKS", "1")
    host = host_with(("one", kinds_plugin("one", "a")), settings=OmniSettings())
    assert host.settings.trace_hooks
    host.stage_kinds()
    err = capsys.readouterr().err
    assert "omni_register_stage_kinds [hook]" in err
    assert "finish omni_register_stage_kinds -->" in err
    host_with(settings=OmniSettings(trace_hooks=False)).stage_kinds()
    assert capsys.readouterr().err == ""


# --- hooks another plugin declares ----------------------------------------------------------------
def declaring_plugin() -> types.ModuleType:
    """A plugin that adds ``omni_things_register`` through ``omni_addhooks`` and implements it."""
    specs = types.ModuleType("things_specs")

    @hookspec
    def omni_things_register():
        """Things, merged."""

    specs.omni_things_register = omni_things_register

    @hookimpl
    def omni_addhooks(plugin_manager):
        plugin_manager.add_hookspecs(specs)

    @hookimpl
    def own_things():
        return ["own"]

    module = plugin("declarer", omni_addhooks=omni_addhooks)
    module.omni_things_register = hookimpl(specname="omni_things_register")(own_things)
    return module


def implementing_plugin(optional: bool = False) -> types.ModuleType:
    @hookimpl(optionalhook=optional)
    def omni_things_register():
        return ["extra"]

    return plugin("implementer", omni_things_register=omni_things_register)


@pytest.mark.parametrize("order", ["declarer first", "implementer first"])
def test_a_plugin_implements_a_hook_another_plugin_declares_in_either_order(
    fake_entry_points, omni_settings, order
):
    entries = [("declarer", declaring_plugin()), ("implementer", implementing_plugin())]
    if order == "implementer first":
        entries.reverse()
    for name, module in entries:
        fake_entry_points.add(name, module)
    host = PluginHost.create(omni_settings)
    assert [e.name for e in fake_entry_points.entries] == [n for n, _ in entries]
    assert sorted(host.results_by_plugin("omni_things_register")) == [
        ("declarer", ["own"]),
        ("implementer", ["extra"]),
    ]


def test_a_hook_nobody_declares_fails_loading_naming_plugin_and_hook(
    fake_entry_points, omni_settings
):
    fake_entry_points.add("implementer", implementing_plugin(), distribution="omni-impl")
    with pytest.raises(PluginLoadError) as err:
        PluginHost.create(omni_settings)
    message = str(err.value)
    for part in ("plugin 'implementer'", "omni-impl", "'omni_things_register'", "optionalhook"):
        assert part in message


def test_an_optional_impl_of_an_absent_plugins_hook_loads(fake_entry_points, omni_settings):
    fake_entry_points.add("implementer", implementing_plugin(optional=True))
    host = PluginHost.create(omni_settings)
    assert host.pm.get_plugin("implementer") is not None
