"""The testing kit's plugin: the ``scripted`` stage kind and the ``scripted-chain`` pipeline.

Registered only in plugin managers whose settings turn on ``testing_kit`` (the kit's pytest plugin
sets ``OMNI_TESTING_KIT=1`` for a test run and its subprocesses) or that name it in
``extra_plugins`` (``omni bench chaos``); never in a production manager."""

from __future__ import annotations

from collections.abc import Iterable

from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import PipelineSpec, StageKind

OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_core.testing.scripted import make_scripted_client
    from omni_core.testing.scripted_core import ScriptedArgs

    return [
        StageKind(
            name="scripted",
            client_factory=make_scripted_client,
            config_model=ScriptedArgs,
            description="deterministic fake engine with fault injection (testing kit)",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    from omni_core.config.pipeline import PipelineConfig
    from omni_core.pipelines import packaged_pipeline

    def load() -> PipelineConfig:
        data = packaged_pipeline("scripted-chain")
        return PipelineConfig.from_dict(data, source="<pipeline scripted-chain>")

    return [PipelineSpec("scripted-chain", load, "three scripted stages (testing kit)")]
