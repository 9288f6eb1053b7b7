"""Plugins take part only in the pipelines that use them (omni_core/plugin/scope.py): the rules,
their reasons, hooks of plugins out of a pipeline never firing there, and tiny-omni keeping its
final-only stages with omni-cfg and omni-duplex installed."""

from __future__ import annotations

import types
from typing import Any

import pytest
from pydantic import BaseModel

from omni_core import PLUGIN_API_VERSION, hookimpl, hookspecs
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.config.settings import OmniSettings
from omni_core.errors import PluginError
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.scope import APPLIES_TO, PER_PIPELINE_HOOKS
from omni_core.plugin.types import Admission, Bridge, ConfigSection, StageKind
from omni_core.testing.scripted import make_scripted_client
from omni_core.testing.scripted_core import ScriptedArgs
from tests.helpers import collect


class Args(BaseModel):
    pass


class Section(BaseModel):
    level: int = 0


def plugin(name: str, **impls: Any) -> types.ModuleType:
    module = types.ModuleType(f"fake_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    for hook, function in impls.items():
        setattr(module, hook, hookimpl(function))
    return module


def kinds(*names: str, factory: Any = None, model: type[BaseModel] = Args) -> Any:
    return lambda: [StageKind(n, factory or (lambda *a: None), model) for n in names]


def host_with(*plugins: tuple[str, Any]) -> PluginHost:
    return PluginHost.create(OmniSettings(), load_entry_points=False, extra_plugins=list(plugins))


def stage(i: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {"id": i, "name": f"s{i}", "kind": kind, "inputs": [i - 1] if i else [], **extra}


def config(name: str, *stages: dict[str, Any], **top: Any) -> PipelineConfig:
    stages[-1]["final_output"] = True
    return PipelineConfig.from_dict({"name": name, "stages": list(stages), **top}, source="<t>")


def active(host: PluginHost, pipeline: PipelineConfig) -> dict[str, str] | None:
    return host.for_pipeline(resolve_pipeline(pipeline, host)).active


# --- the rules ------------------------------------------------------------------------------------
def rule_plugins() -> list[tuple[str, Any]]:
    def observe(request_id: str) -> None:
        pass

    return [
        ("uses-kind", plugin("k", omni_register_stage_kinds=kinds("k-kind"))),
        (
            "section",
            plugin(
                "s",
                omni_register_config_sections=lambda: [ConfigSection("sec", Section)],
                omni_request_terminal=observe,
            ),
        ),
        ("bridge", plugin("b", omni_register_bridges=lambda: [Bridge("b-bridge", lambda *a: 1)])),
        ("listed", plugin("l", omni_register_stage_kinds=kinds("l-kind"))),
        ("everywhere", plugin("e", omni_request_terminal=observe)),
        (
            "decider",
            plugin(
                "d",
                omni_register_stage_kinds=kinds("d-kind"),
                omni_applies_to=lambda pipeline: pipeline.config.name == "decided",
            ),
        ),
        ("unused", plugin("u", omni_register_stage_kinds=kinds("u-kind"))),
    ]


def test_each_plugin_taking_part_is_named_with_its_reason_and_the_others_stay_out():
    host = host_with(*rule_plugins())
    uses_all = config(
        "decided",
        stage(0, "k-kind"),
        stage(1, "scripted", bridge="b-bridge"),
        requires_plugins=["listed"],
        sec={"level": 2},
    )
    assert active(host, uses_all) == {
        "builtin": "its engine kind 'turn' is used",
        "testing": "its stage kind 'scripted' is used",
        "uses-kind": "its stage kind 'k-kind' is used",
        "section": "its config section 'sec' is used",
        "bridge": "its bridge 'b-bridge' is used",
        "listed": "listed in requires_plugins",
        "everywhere": "registers nothing a pipeline uses: takes part everywhere",
        "decider": "its omni_applies_to returned True",
    }
    plain = config("plain", stage(0, "scripted"))
    assert active(host, plain) == {
        "builtin": "its engine kind 'turn' is used",
        "testing": "its stage kind 'scripted' is used",
        "everywhere": "registers nothing a pipeline uses: takes part everywhere",
    }
    # using a plugin wins over its own rule
    assert "decider" in active(host, config("plain", stage(0, "d-kind"))).keys()  # type: ignore[union-attr]


def test_the_engine_kind_a_pipeline_selects_brings_its_plugin_in():
    from omni_core.engine.async_engine import AsyncOmniEngine
    from omni_core.plugin.types import EngineKind

    class Other(AsyncOmniEngine):
        pass

    engines = plugin("eng", omni_register_engine_kinds=lambda: [EngineKind("other", Other)])
    host = host_with(("engines", engines))
    assert "engines" in active(host, config("x", stage(0, "scripted"), engine="other"))  # type: ignore[operator]
    assert "engines" not in active(host, config("x", stage(0, "scripted")))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (lambda pipeline: "yes", "plugin 'picky': omni_applies_to returned str, expected bool"),
        (
            lambda pipeline: 1 / 0,
            "plugin 'picky' failed in omni_applies_to for pipeline 'x': ZeroDivisionError",
        ),
    ],
)
def test_a_broken_applies_to_rule_names_the_plugin(rule: Any, message: str):
    picky = plugin("p", omni_register_stage_kinds=kinds("p-kind"), omni_applies_to=rule)
    host = host_with(("picky", picky))
    with pytest.raises(PluginError) as info:
        active(host, config("x", stage(0, "scripted")))
    assert message in str(info.value)


def test_every_hook_is_either_per_pipeline_or_global():
    """A new hook must be classified: per-pipeline hooks are the lifecycle ones."""
    specs = {n for n, f in vars(hookspecs).items() if hasattr(f, "omni_core_spec")}
    asked_before_start = {"omni_addhooks", APPLIES_TO, "omni_pipeline_voices"}
    global_ = {n for n in specs if n.startswith("omni_register_")} | asked_before_start
    assert set(PER_PIPELINE_HOOKS) == specs - global_


def test_a_pipelines_host_refuses_late_registrations():
    host = host_with()
    scoped = host.for_pipeline(resolve_pipeline(config("x", stage(0, "scripted")), host))
    with pytest.raises(PluginError, match="before the engine starts"):
        scoped.register(plugin("late"), "late")


# --- hooks of plugins out of a pipeline never fire there -----------------------------------------
async def test_hooks_fire_only_in_the_pipelines_a_plugin_takes_part_in(make_engine):
    calls: list[tuple[str, str]] = []

    def scripted_factory(*args: Any) -> Any:
        return make_scripted_client(*args)

    owned = plugin(
        "owned",
        omni_register_stage_kinds=kinds("owned-kind", factory=scripted_factory, model=ScriptedArgs),
        omni_admit_request=lambda request_id: calls.append(("admit", request_id)) or Admission(),
        omni_stage_output=lambda request_id: calls.append(("output", request_id)),
        omni_request_terminal=lambda request_id: calls.append(("owned-terminal", request_id)),
    )
    everywhere = plugin(
        "e", omni_request_terminal=lambda request_id: calls.append(("terminal", request_id))
    )
    plugins = [("owned", owned), ("everywhere", everywhere)]
    plain = make_engine(config("plain", stage(0, "scripted")), plugins=host_with(*plugins))
    await collect(plain, "hi", request_id="r-plain")
    assert calls == [("terminal", "r-plain")]

    calls.clear()
    using = make_engine(config("using", stage(0, "owned-kind")), plugins=host_with(*plugins))
    await collect(using, "hi", request_id="r-using")
    assert calls[0] == ("admit", "r-using")
    assert ("output", "r-using") in calls
    assert sorted(c for c in calls if "terminal" in c[0]) == [
        ("owned-terminal", "r-using"),
        ("terminal", "r-using"),
    ]


# --- tiny-omni keeps vLLM's final-only mode with omni-cfg and omni-duplex installed --------------
def recording_plugin(seen: dict[str, bool]) -> types.ModuleType:
    """Stage kind ``recording``: the scripted engine, recording each stage's ``stream_outputs``
    (False: the orchestrator asked for the final output only, vLLM's FINAL_ONLY)."""

    def factory(stage_config: Any, replica: int, context: Any) -> Any:
        client = make_scripted_client(stage_config, replica, context)
        add_request = client.add_request

        async def record(request: Any) -> None:
            seen[stage_config.name] = request.stream_outputs
            await add_request(request)

        client.add_request = record
        return client

    return plugin(
        "rec", omni_register_stage_kinds=kinds("recording", factory=factory, model=ScriptedArgs)
    )


def tiny_omni(edges: str) -> PipelineConfig:
    """The shipped tiny-omni pipeline with its engines swapped for recording scripted ones."""
    shipped = host_with().pipelines()["tiny-omni"].load().model_dump()
    for row in shipped["stages"]:
        row.update(kind="recording", engine_args={"num_tokens": 3}, restart={"policy": "no"})
        for edge in row["inputs"]:
            edge["mode"] = edges
    return PipelineConfig.from_dict(shipped, source="<tiny-omni recorded>")


@pytest.mark.parametrize("edges", ["stream", "on_finish"])
async def test_tiny_omni_streams_the_same_stages_with_cfg_and_duplex_installed(make_engine, edges):
    cfg = pytest.importorskip("omni_cfg.plugin")
    duplex = pytest.importorskip("omni_duplex.plugin")
    streamed: dict[str, dict[str, bool]] = {}
    for label, extra in (("alone", []), ("installed", [("cfg", cfg), ("duplex", duplex)])):
        seen: dict[str, bool] = {}
        host = host_with(("rec", recording_plugin(seen)), *extra)
        engine = make_engine(tiny_omni(edges), plugins=host)
        outputs = await collect(engine, "hello")
        assert outputs[-1].finished
        streamed[label] = seen
    assert streamed["installed"] == streamed["alone"]
    if edges == "on_finish":  # nobody reads the talker's deltas: one final output, as vLLM's
        assert streamed["installed"] == {"thinker": True, "talker": False, "vocoder": True}
    else:
        assert streamed["installed"] == {"thinker": True, "talker": True, "vocoder": True}


def test_metrics_and_tracing_observe_every_pipeline():
    pytest.importorskip("prometheus_client")
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider

    from omni_core.serve.metrics import OmniMetrics
    from omni_core.serve.tracing import OmniTracing

    host = host_with(*rule_plugins())
    host.register(OmniMetrics(), "omni-metrics")
    host.register(OmniTracing(TracerProvider()), "omni-tracing")
    for pipeline in (config("plain", stage(0, "scripted")), config("x", stage(0, "k-kind"))):
        taking_part = active(host, pipeline) or {}
        assert {"omni-metrics", "omni-tracing"} <= taking_part.keys()
