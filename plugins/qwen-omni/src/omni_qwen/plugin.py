"""The hook implementations omni-core loads (entry point ``qwen`` -> this module).

Cheap to import (a plugin manager imports it whenever one is built): the builder, transformers
and vLLM are imported only when a model is built or a stage starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from omni_core.extend import packaged_checksums
from omni_core.family import lazy_pipeline, tiny_model
from omni_core.plugin import Benchmark, Bridge, ModelSpec, PipelineSpec, hookimpl

if TYPE_CHECKING:
    from typing import Any

OMNI_PLUGIN_API_VERSION = 3

TINY_MODEL = "tiny-qwen2.5-omni"
TINY_VERSION = "v2"  # bump whenever the builder's output changes (a new cache directory)


def committed_checksums() -> dict[str, str]:
    """SHA-256 of every file of the tiny checkpoint, as built here (``checksums.json``)."""
    return packaged_checksums("omni_qwen")


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    return [
        tiny_model(
            TINY_MODEL,
            "omni_qwen.build:build",
            TINY_VERSION,
            package="omni_qwen",
            description="Qwen2.5-Omni architecture at tiny sizes (thinker+audio/vision encoders, "
            "talker, token2wav), random weights from a fixed seed, ~18 MB",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [
        lazy_pipeline(
            "qwen2.5-omni-thinker",
            "omni_qwen.pipelines:thinker_pipeline",
            "Qwen2.5-Omni thinker on vLLM (tiny-qwen2.5-omni): text/audio/image in, text out",
        ),
        lazy_pipeline(
            "qwen2.5-omni",
            "omni_qwen.pipelines:omni_pipeline",
            "Qwen2.5-Omni (tiny-qwen2.5-omni): thinker on vLLM -> talker -> token2wav; "
            "text/audio/image in, text and 24 kHz speech out",
            default=True,  # omni run with no PIPELINE (docs/models.md: the main job)
        ),
        lazy_pipeline(
            "qwen2.5-omni-duplex",
            "omni_qwen.duplex:duplex_pipeline",
            "qwen2.5-omni as full-duplex speech sessions (needs omni-duplex): spoken turns "
            "heard as audio, text + streamed speech replies",
        ),
        lazy_pipeline(
            "qwen2.5-omni-duplex-text",
            "omni_qwen.duplex:resumable_pipeline",
            "the Qwen2.5-Omni thinker as duplex sessions holding the conversation in one "
            "resumable vLLM request each (text replies; needs omni-duplex)",
        ),
    ]


@hookimpl(optionalhook=True)
def omni_duplex_register_models() -> Iterable[Any]:
    """omni-duplex's hook (optional: omni-qwen works without omni-duplex installed)."""
    from omni_duplex.model import DuplexModelSpec

    from omni_qwen.duplex import MODEL, RESUMABLE_MODEL, build_model, build_resumable_model

    return [
        DuplexModelSpec(
            MODEL, build_model, "Qwen2.5-Omni: spoken turns as audio, text + streamed speech"
        ),
        DuplexModelSpec(
            RESUMABLE_MODEL,
            build_resumable_model,
            "Qwen2.5-Omni thinker: the conversation in one resumable request; text replies",
        ),
    ]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_qwen.bridge import talker_codes, thinker_to_talker

    return [
        Bridge(
            "qwen2.5-omni-talker",
            thinker_to_talker,
            "Qwen2.5-Omni thinker outputs (hidden states, prompt and reply ids) -> talker input",
        ),
        Bridge(
            "qwen2.5-omni-token2wav",
            talker_codes,
            "Qwen2.5-Omni talker codes -> token2wav input (none too: zero-length audio)",
        ),
    ]


@hookimpl
def omni_register_benchmarks() -> Iterable[Benchmark]:
    def run(quick: bool) -> Any:
        from omni_qwen.bench import bench_qwen_omni

        return bench_qwen_omni(quick)

    return [
        Benchmark(
            "qwen-omni",
            run,
            "qwen2.5-omni (tiny): time to first audio, stream vs on_finish thinker->talker, "
            "and the orchestration share of it",
        )
    ]


@hookimpl
def omni_applies_to(pipeline: Any) -> bool:
    """Asked for pipelines that use neither omni-qwen's bridge nor ``requires_plugins: [qwen]``:
    one that runs the talker or token2wav engine on the core's torch kind gets the voice check."""
    from omni_qwen.voices import voiced

    return voiced(pipeline.config)


@hookimpl
def omni_pipeline_voices(pipeline: Any) -> tuple[str, ...] | None:
    """The talker's and token2wav's voices, before any stage starts (``omni run --voice``
    refuses another one without loading a model): omni_qwen.voices.declared_voices."""
    from omni_qwen.voices import declared_voices

    return declared_voices(pipeline.config)


@hookimpl
def omni_admit_request(pipeline: Any, params: Any) -> None:
    """An unknown voice is a 400 before the request starts (omni_qwen.voices): called only for
    the pipelines omni-qwen takes part in (its bridge or ``requires_plugins: [qwen]``)."""
    from omni_qwen.voices import check_voices

    check_voices(pipeline.config, params)  # pipeline: the PipelineView
