"""docs/pipelines.md is the generator's output, covers every field, and is machine-independent."""

from __future__ import annotations

import types
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.pipeline import (
    InputEdge,
    OutputType,
    PipelineConfig,
    RestartPolicy,
    StageConfig,
    StageResources,
)
from omni_core.config.reference import (
    REGENERATE,
    core_host,
    render_reference,
    rst_to_markdown,
)
from omni_core.config.schema import INTERNAL_FIELDS
from omni_core.config.settings import OmniSettings
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import ConfigSection

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"


@pytest.fixture(scope="module")
def reference() -> str:
    return render_reference()


def test_docs_pipelines_md_is_up_to_date(reference):
    assert DOC.read_text() == reference, (
        f"docs/pipelines.md is out of date with the code: regenerate it with `{REGENERATE}`"
    )


def test_output_ignores_installed_and_disabled_plugins(reference, monkeypatch):
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "builtin,testing")
    assert render_reference() == reference
    installed = PluginHost.create(OmniSettings(disable_plugins=[]))  # entry points too
    extra = set(installed.stage_kinds()) - set(core_host().stage_kinds())
    for kind in extra:  # kinds of plugin packages (if any are installed) are not listed
        assert f"kind: {kind}" not in reference


def undescribed(model: type[BaseModel]) -> list[str]:
    return [
        f"{model.__name__}.{name}"
        for name, field in model.model_fields.items()
        if name not in INTERNAL_FIELDS and not (field.description or "").strip()
    ]


def test_every_field_has_a_description():
    models = [PipelineConfig, StageConfig, InputEdge, RestartPolicy, StageResources]
    models += [kind.config_model for kind in core_host().stage_kinds().values()]
    missing = [name for model in models for name in undescribed(model)]
    assert missing == [], f"add Field(description=...) to {missing}, then `{REGENERATE}`"


def section(reference: str, heading: str) -> str:
    start = reference.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = reference.find(f"\n{level} ", start + len(heading) + 2)
    return reference[start : end if end != -1 else None]


def test_every_kind_lists_each_engine_arg_with_its_default(reference):
    kinds = core_host().stage_kinds()
    assert {"python", "scripted", "vllm", "vocoder", "torch"} <= set(kinds)
    for name, kind in kinds.items():
        text = section(reference, f"### kind: {name}")
        for field, info in kind.config_model.model_fields.items():
            row = next(line for line in text.splitlines() if line.startswith(f"| `{field}` |"))
            assert ("required" in row) == info.is_required(), row
    assert "| `num_tokens` | integer (>= 1) | `4` |" in reference


def test_inputs_forms_edge_modes_output_types_and_bridges_are_listed(reference):
    inputs = section(reference, "## Inputs")
    assert (
        "`inputs: [0, 1]`" in inputs and "`inputs: [{stage: 0, mode: stream, chunk: 8}]`" in inputs
    )
    for mode in get_args(InputEdge.model_fields["mode"].annotation):
        assert f"\n- `{mode}`: " in inputs
    values = section(reference, "## final_output_type")
    assert all(f"`{value}`" in values for value in get_args(OutputType))
    bridges = section(reference, "## Bridges")
    assert "Without `bridge:`, `default_bridge`" in bridges
    for name in core_host().bridges():
        assert f"| `{name}` |" in bridges


def test_links_point_at_headings(reference):
    import re

    from omni_core.config.reference import slug

    anchors = {slug(line.lstrip("#")) for line in reference.splitlines() if line.startswith("#")}
    links = re.findall(r"\]\(#([^)]+)\)", reference)
    assert links and sorted(set(links) - anchors) == []


def test_plugin_sections_are_rendered_when_the_host_has_them():
    class Volume(BaseModel):
        level: int = 1

    module = types.ModuleType("fake_volume")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    module.omni_register_config_sections = hookimpl(
        lambda: [ConfigSection("volume", Volume, "how loud")]
    )
    host = PluginHost.create(
        OmniSettings(disable_plugins=[]),
        load_entry_points=False,
        extra_plugins=[("volume", module)],
    )
    text = section(render_reference(host), "### section: volume")
    assert "how loud" in text and "| `level` | integer | `1` |" in text


def test_rst_markup_becomes_markdown():
    text = "``engine_args`` of :class:`~omni_core.media.AudioChunk`, see :mod:`omni_core.stage`"
    assert rst_to_markdown(text) == "`engine_args` of `AudioChunk`, see `omni_core.stage`"
