"""Plugin loading: built-ins, entry points, blocking, API version, load failures, conflicts."""

from __future__ import annotations

import types

import pytest
from pydantic import BaseModel

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.settings import OmniSettings
from omni_core.errors import PluginConflictError, PluginLoadError
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import StageKind


def make_plugin(name: str, kinds: tuple[str, ...] = (), version: object = PLUGIN_API_VERSION):
    module = types.ModuleType(f"fake_{name}")
    if version is not None:
        module.OMNI_PLUGIN_API_VERSION = version

    class Args(BaseModel):
        pass

    @hookimpl
    def omni_register_stage_kinds():
        return [StageKind(k, lambda *a: None, Args) for k in kinds]

    module.omni_register_stage_kinds = omni_register_stage_kinds
    return module


def test_entry_point_plugin_is_registered_with_its_distribution(fake_entry_points, omni_settings):
    fake_entry_points.add(
        "mine", make_plugin("mine", ("mykind",)), distribution="omni-mine", version="2.1"
    )
    host = PluginHost.create(omni_settings)
    assert "mykind" in host.stage_kinds()
    assert host.stage_kind_providers()["mykind"] == "mine"
    info = host.pm.plugin_info["mine"]
    assert (info.distribution, info.version, info.builtin) == ("omni-mine", "2.1", False)
    assert host.hooks_of("mine") == ["omni_register_stage_kinds"]


def test_each_call_builds_a_fresh_manager(fake_entry_points, omni_settings):
    a = PluginHost.create(omni_settings)
    b = PluginHost.create(omni_settings)
    assert a.pm is not b.pm


def test_import_failure_names_entry_point_distribution_and_version(
    fake_entry_points, omni_settings
):
    fake_entry_points.add(
        "broken",
        ImportError("No module named 'missing_dep'"),
        distribution="omni-broken",
        version="0.3",
        value="omni_broken.plugin",
    )
    with pytest.raises(PluginLoadError) as err:
        PluginHost.create(omni_settings)
    message = str(err.value)
    for part in ("'broken'", "omni_broken.plugin", "omni-broken", "0.3", "missing_dep"):
        assert part in message


def test_disabled_plugin_is_never_imported(fake_entry_points, monkeypatch):
    fake_entry_points.add("broken", ImportError("would fail"))
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "broken, other")
    settings = OmniSettings()
    assert settings.disable_plugins == ["broken", "other"]
    host = PluginHost.create(settings)
    assert host.pm.get_plugin("broken") is None
    assert host.pm.disabled == ["broken", "other"]


def test_builtin_plugins_can_be_disabled_too(fake_entry_points):
    host = PluginHost.create(OmniSettings(disable_plugins=["testing"]))
    assert "scripted" not in host.stage_kinds()
    assert "python" in host.stage_kinds()


def test_two_plugins_registering_one_kind_conflict_naming_both(fake_entry_points, omni_settings):
    fake_entry_points.add("first", make_plugin("first", ("dup",)))
    fake_entry_points.add("second", make_plugin("second", ("dup",)))
    host = PluginHost.create(omni_settings)
    with pytest.raises(PluginConflictError) as err:
        host.stage_kinds()
    assert "'dup'" in str(err.value) and "'first'" in str(err.value)
    assert "'second'" in str(err.value)


def test_plugin_conflicting_with_a_builtin_kind(fake_entry_points, omni_settings):
    fake_entry_points.add("shadow", make_plugin("shadow", ("scripted",)))
    with pytest.raises(PluginConflictError, match="'testing' and 'shadow'|'shadow' and 'testing'"):
        PluginHost.create(omni_settings).stage_kinds()


@pytest.mark.parametrize("version", [None, 99])
def test_plugin_api_version_is_checked(fake_entry_points, omni_settings, version):
    fake_entry_points.add("old", make_plugin("old", version=version))
    with pytest.raises(PluginLoadError, match="'old'.*(OMNI_PLUGIN_API_VERSION|version 99)"):
        PluginHost.create(omni_settings)


def test_misspelled_hook_fails_loading(fake_entry_points, omni_settings):
    module = make_plugin("typo")

    @hookimpl
    def omni_register_stage_kindz():
        return []

    module.omni_register_stage_kindz = omni_register_stage_kindz
    fake_entry_points.add("typo", module)
    with pytest.raises(PluginLoadError, match="typo.*omni_register_stage_kindz"):
        PluginHost.create(omni_settings)


def test_registration_of_wrong_type_is_reported(fake_entry_points, omni_settings):
    module = make_plugin("wrong")

    @hookimpl
    def omni_register_bridges():
        return ["not a bridge"]

    module.omni_register_bridges = omni_register_bridges
    fake_entry_points.add("wrong", module)
    with pytest.raises(Exception, match="plugin 'wrong'.*expected Bridge"):
        PluginHost.create(omni_settings).bridges()


def test_plugin_types_reject_bad_names():
    from omni_core.errors import PluginError

    with pytest.raises(PluginError, match="invalid"):
        StageKind("Bad Name", lambda *a: None, BaseModel)


def test_addhooks_lets_a_plugin_add_its_own_hookspecs(fake_entry_points, omni_settings):
    from omni_core.plugin import hookspec

    specs = types.ModuleType("my_specs")

    @hookspec
    def omni_example_event(value):
        """A plugin-defined hook."""

    specs.omni_example_event = omni_example_event
    module = make_plugin("adder")

    @hookimpl
    def omni_addhooks(plugin_manager):
        plugin_manager.add_hookspecs(specs)

    module.omni_addhooks = omni_addhooks
    fake_entry_points.add("adder", module)
    host = PluginHost.create(omni_settings)
    assert host.pm.hook.omni_example_event(value=1) == []
