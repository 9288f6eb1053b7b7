"""The hook implementations omni-core loads (entry point ``qwen3-tts`` -> this module).

Cheap to import: the builder, qwen-tts (librosa, numba) and torch load only when a model is built,
a stage starts or ``omni serve`` mounts the speech route.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omni_core.family import lazy_pipeline, tiny_model
from omni_core.plugin import Benchmark, ModelSpec, PipelineSpec, ServerRoute, hookimpl

OMNI_PLUGIN_API_VERSION = 3

TINY_MODEL = "tiny-qwen3-tts"
TINY_VERSION = "v2"  # bump whenever the builder's output changes (a new cache directory)


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    return [
        tiny_model(
            TINY_MODEL,
            "omni_qwen3_tts.build:build",
            TINY_VERSION,
            package="omni_qwen3_tts",
            description="Qwen3-TTS at tiny sizes: custom_voice/, voice_design/, base/ (talker + "
            "code predictor, 12 Hz speech tokenizer), random weights from a fixed seed, ~18 MB",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [
        lazy_pipeline(
            "qwen3-tts",
            "omni_qwen3_tts.pipelines:tts_pipeline",
            "Qwen3-TTS custom voice (tiny-qwen3-tts): talker + code predictor (batched) -> "
            "12 Hz decoder (streamed); text in, 24 kHz speech out",
        ),
        lazy_pipeline(
            "qwen3-tts-design",
            "omni_qwen3_tts.pipelines:design_pipeline",
            "Qwen3-TTS voice design (tiny-qwen3-tts): instructions describe the voice",
        ),
        lazy_pipeline(
            "qwen3-tts-clone",
            "omni_qwen3_tts.pipelines:clone_pipeline",
            "Qwen3-TTS voice clone, x-vector mode (tiny-qwen3-tts base): extra.ref_audio is the "
            "reference speech",
        ),
    ]


@hookimpl
def omni_register_server_routes() -> Iterable[ServerRoute]:
    from omni_qwen3_tts.speech import mount

    return [
        ServerRoute(
            "qwen3-tts-speech",
            mount,
            "/v1/audio/speech (OpenAI's shape; audio or SSE streamed) and /v1/audio/voices",
        )
    ]


@hookimpl
def omni_register_benchmarks() -> Iterable[Benchmark]:
    def talker(quick: bool) -> Any:
        from omni_qwen3_tts.bench import bench_talker

        return bench_talker(quick)

    def speech(quick: bool) -> Any:
        from omni_qwen3_tts.tts_bench import bench_tts

        return bench_tts(quick)

    return [
        Benchmark(
            "qwen3-tts",
            speech,
            "qwen3-tts (tiny): TTFP, RTF and underruns p50/p99 at C=1/4/16, the decoder "
            "streamed vs whole in the same run",
        ),
        Benchmark(
            "qwen3-tts-talker",
            talker,
            "qwen3-tts talker + code predictor (tiny, in-process): requests/s at C=8/16, decode "
            "steps batched across requests vs one forward each, in the same run",
        ),
    ]
