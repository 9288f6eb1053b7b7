"""The hook implementations omni-core loads (entry point ``qwen3`` -> this module).

Cheap to import: the builder, transformers and vLLM are imported only when a model is built or a
stage starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omni_core.extend import packaged_checksums
from omni_core.family import lazy_pipeline, tiny_model
from omni_core.plugin import Benchmark, Bridge, ModelSpec, PipelineSpec, hookimpl

OMNI_PLUGIN_API_VERSION = 3

TINY_MODEL = "tiny-qwen3-omni"
TINY_VERSION = "v1"  # bump whenever the builder's output changes (a new cache directory)


def committed_checksums() -> dict[str, str]:
    """SHA-256 of every file of the tiny checkpoint, as built here (``checksums.json``)."""
    return packaged_checksums("omni_qwen3")


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    return [
        tiny_model(
            TINY_MODEL,
            "omni_qwen3.build:build",
            TINY_VERSION,
            package="omni_qwen3",
            description="Qwen3-Omni architecture at tiny sizes (MoE thinker+audio/vision "
            "encoders, MoE talker + code predictor, causal code2wav), random weights from a "
            "fixed seed, ~10 MB",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [
        lazy_pipeline(
            "qwen3-omni-thinker",
            "omni_qwen3.pipelines:thinker_pipeline",
            "Qwen3-Omni MoE thinker on vLLM (tiny-qwen3-omni): text/audio/image in, text out",
        ),
        lazy_pipeline(
            "qwen3-omni",
            "omni_qwen3.pipelines:omni_pipeline",
            "Qwen3-Omni (tiny-qwen3-omni): MoE thinker on vLLM -> talker + code predictor -> "
            "code2wav; text/audio/image in, text and 24 kHz speech out",
        ),
    ]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_qwen3.bridge import BRIDGE, CODE2WAV_BRIDGE, talker_to_code2wav, thinker_to_talker

    return [
        Bridge(
            BRIDGE,
            thinker_to_talker,
            "Qwen3-Omni thinker outputs (embeddings, the talker's layer, prompt and reply ids) "
            "-> talker input",
        ),
        Bridge(
            CODE2WAV_BRIDGE,
            talker_to_code2wav,
            "Qwen3-Omni talker codec frames -> code2wav input (none too: zero-length audio)",
        ),
    ]


@hookimpl
def omni_register_benchmarks() -> Iterable[Benchmark]:
    def run(quick: bool) -> Any:
        from omni_qwen3.bench import bench_qwen3_omni

        return bench_qwen3_omni(quick)

    def talker(quick: bool) -> Any:
        from omni_qwen3.talker_bench import bench_talker

        return bench_talker(quick)

    return [
        Benchmark(
            "qwen3-omni",
            run,
            "qwen3-omni (tiny): TTFP, RTF and underruns p50/p99 at C=1/4/16, code2wav streamed "
            "vs whole in the same run",
        ),
        Benchmark(
            "qwen3-omni-talker",
            talker,
            "qwen3-omni talker (tiny, in-process): requests/s at C=8/16, decode steps batched "
            "across requests vs one forward each, in the same run",
        ),
    ]
