"""Plugin API versions: a plugin written for API 2 loads unchanged (API 3's renamed argument is a
deprecation cycle) unless it implements omni_admit_request (its pipeline argument changed type); one written for an older API fails to load with a message naming it, its
version, what changed since and the migration section of docs/plugins.md; ``omni`` exits 2."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION
from omni_core.cli import main
from omni_core.errors import PluginLoadError
from omni_core.plugin import hookimpl
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.manager import API_CHANGES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def plugin_declaring(version: object) -> types.ModuleType:
    module = types.ModuleType("omni_old")
    if version is not None:
        module.OMNI_PLUGIN_API_VERSION = version
    return module


def load_error(fake_entry_points, omni_settings, version: object) -> str:
    fake_entry_points.add("old", plugin_declaring(version), distribution="omni-old", version="0.4")
    with pytest.raises(PluginLoadError) as info:
        PluginHost.create(omni_settings)
    return str(info.value)


def test_the_current_version_is_3_and_says_what_changed():
    assert PLUGIN_API_VERSION == 3
    assert "port" in API_CHANGES[2] and "pipelines that use it" in API_CHANGES[2]
    assert "omni_pipeline_plugin" in API_CHANGES[3] and "run_id" in API_CHANGES[3]


def test_a_version_2_plugin_loads_unchanged(fake_entry_points, omni_settings):
    fake_entry_points.add("old", plugin_declaring(2), distribution="omni-old", version="0.4")
    assert PluginHost.create(omni_settings).pm.get_plugin("old") is not None


def test_a_version_2_admission_hook_fails_to_load_naming_the_migration(
    fake_entry_points, omni_settings
):
    module = plugin_declaring(2)
    module.omni_admit_request = hookimpl(lambda pipeline: None)  # type: ignore[attr-defined]
    fake_entry_points.add("old", module, distribution="omni-old", version="0.4")
    with pytest.raises(PluginLoadError) as info:
        PluginHost.create(omni_settings)
    message = str(info.value)
    assert "omni_admit_request takes pipeline" in message and "pipeline.config" in message
    assert message.endswith("docs/plugins.md#migrating-from-api-2-to-api-3")
    module.OMNI_PLUGIN_API_VERSION = 3  # type: ignore[attr-defined]
    assert PluginHost.create(omni_settings).pm.get_plugin("old") is module


async def test_a_version_2_admission_hook_without_pipeline_loads_and_admits(
    fake_entry_points, omni_settings, make_engine
):
    """Only the ``pipeline`` argument changed meaning: a v2 impl that never takes it loads (it
    was refused whatever its arguments before) and still decides admissions."""
    from omni_core import RequestRejected

    module = plugin_declaring(2)

    def omni_admit_request(request_id, prompt):
        if "forbidden" in str(prompt):
            raise RequestRejected(403, f"{request_id} refused")

    module.omni_admit_request = hookimpl(omni_admit_request)  # type: ignore[attr-defined]
    fake_entry_points.add("old", module, distribution="omni-old", version="0.4")
    with pytest.warns(DeprecationWarning, match="request_id"):
        host = PluginHost.create(omni_settings)
    assert host.pm.get_plugin("old") is module
    engine = make_engine(SCRIPTED, plugins=host)
    [out] = [o async for o in engine.generate("a forbidden word", request_id="r1")]
    assert (out.error.status_code, out.error.message) == (403, "r1 refused")
    outs = [o async for o in engine.generate("fine", request_id="r2")]
    assert outs[-1].finished and outs[-1].error is None


SCRIPTED = """
name: one
stages:
  - {id: 0, name: s, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


def test_a_version_1_plugin_is_told_what_changed_and_where_to_migrate(
    fake_entry_points, omni_settings
):
    message = load_error(fake_entry_points, omni_settings, 1)
    assert message == (
        "plugin 'old' (entry point 'omni_old' from omni-old 0.4) declares plugin API version 1, "
        f"but this omni-core provides version 3. Changed since 1: {API_CHANGES[2]}; "
        f"{API_CHANGES[3]}. Migrate the plugin: docs/plugins.md#migrating-from-api-1-to-api-2"
    )


def test_the_migration_links_name_sections_of_the_plugin_guide():
    headings = re.findall(r"^#+ (.+)$", DOCS.read_text(), flags=re.M)
    slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-") for h in headings}
    assert "migrating-from-api-1-to-api-2" in slugs
    assert "migrating-from-api-2-to-api-3" in slugs


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (None, "does not declare OMNI_PLUGIN_API_VERSION (omni-core plugin API version is 3;"),
        (4, "declares plugin API version 4, but this omni-core provides version 3 (the plugin "),
        ("2", "declares plugin API version '2', but this omni-core provides version 3"),
        (True, "declares plugin API version True, but this omni-core provides version 3"),
    ],
)
def test_other_declarations_are_refused_naming_the_plugin(
    fake_entry_points, omni_settings, version, expected
):
    message = load_error(fake_entry_points, omni_settings, version)
    assert message.startswith("plugin 'old' (entry point 'omni_old' from omni-old 0.4)")
    assert expected in message


def test_omni_exits_2_on_a_version_1_plugin(fake_entry_points, omni_settings, capsys):
    fake_entry_points.add("old", plugin_declaring(1), distribution="omni-old", version="0.4")
    assert main(["stages"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: plugin 'old' (entry point 'omni_old' from omni-old 0.4)")
    assert "docs/plugins.md#migrating-from-api-1-to-api-2" in err
