"""The hook implementations omni-core loads (entry point ``wan`` -> this module).

Cheap to import: the builder, diffusers and torch are imported only when a model is built or a
stage starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from omni_core.extend import packaged_checksums
from omni_core.plugin import (
    Benchmark,
    Bridge,
    ModelSpec,
    PipelineSpec,
    RunOption,
    ServerRoute,
    StageKind,
    hookimpl,
)

if TYPE_CHECKING:
    from pathlib import Path

    from omni_core import PipelineConfig, SamplingParams
    from omni_core.plugin import Admission, OrchestratorPort, PluginHost, RequestView

OMNI_PLUGIN_API_VERSION = 3

TINY_VERSION = "v2"  # bump whenever the builder's output changes (a new cache directory)
VERSIONS = {"2.1": "tiny-wan2.1", "2.2": "tiny-wan2.2"}


def committed_checksums(version: str) -> dict[str, str]:
    """SHA-256 of every file of the tiny Wan ``version`` checkpoint (``checksums-V.json``)."""
    return packaged_checksums("omni_wan", f"checksums-{version}.json")


def _builder(version: str):  # type: ignore[no-untyped-def]
    def build_tiny(out: Path) -> None:
        from omni_wan.kind import require_diffusers

        require_diffusers(f"model '{VERSIONS[version]}'")
        from omni_wan.build import build

        build(out, version)

    return build_tiny


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    return [
        ModelSpec(
            name,
            _builder(version),
            TINY_VERSION,
            committed_checksums(version),
            f"Wan {version} text-to-video at tiny sizes (UMT5 encoder, "
            + ("two DiT experts" if version == "2.2" else "DiT")
            + ", VAE, UniPC scheduler), random weights from a fixed seed, < 1 MB",
        )
        for version, name in VERSIONS.items()
    ]


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_wan.kind import WanArgs, make_wan_client

    return [
        StageKind(
            "wan",
            make_wan_client,
            WanArgs,
            "Wan's DiT(s) + UniPC scheduler + VAE (diffusers) on prompt embeddings, one "
            "denoising step per engine step, CFG from weighted conditionings; a video",
            output_mode="whole",
            accepts=("conditionings",),  # what omni-cfg guides
        )
    ]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_wan.bridge import wan_embeds_bridge

    return [
        Bridge(
            "wan-embeds",
            wan_embeds_bridge,
            "the Wan encoder stage's final hidden states as {'prompt_embeds': array}",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    def loader(version: str):  # type: ignore[no-untyped-def]
        def load(host: PluginHost) -> PipelineConfig:
            from omni_wan.pipelines import wan_pipeline

            return wan_pipeline(host, version)

        return load

    return [
        PipelineSpec(
            f"wan{version}-t2v",
            loader(version),
            f"Wan {version} text-to-video ({name}): UMT5 encoder (torch) -> DiT + VAE "
            "(diffusers), an MP4; guidance through omni-cfg",
        )
        for version, name in VERSIONS.items()
    ]


def _size(text: str) -> tuple[int, int]:
    width, sep, height = text.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(f"{text!r} is not WIDTHxHEIGHT (e.g. 64x48)")
    return int(width), int(height)


@hookimpl
def omni_register_run_options() -> Iterable[RunOption]:
    # omni run wan2.1-t2v --frames 9 --fps 8 --video-size 64x48 --guidance-2 3: the request's
    # extra["wan"] (bounds checked at admission: exit 2 naming the field)
    return [
        RunOption(
            "frames",
            lambda n: {"wan": {"num_frames": n}},
            help="Video frames, 4k+1 (omni-wan: extra['wan'].num_frames).",
            parse=int,
            metavar="N",
        ),
        RunOption(
            "fps",
            lambda n: {"wan": {"fps": n}},
            help="Frames per second of the MP4 (omni-wan: extra['wan'].fps).",
            parse=int,
            metavar="N",
        ),
        RunOption(
            "video-size",
            lambda wh: {"wan": {"width": wh[0], "height": wh[1]}},
            help="Video WIDTHxHEIGHT, multiples of 16 (omni-wan: extra['wan'].width/height).",
            parse=_size,
            metavar="WxH",
        ),
        RunOption(
            "guidance-2",
            lambda g: {"wan": {"guidance_scale_2": g}},
            help="Wan 2.2's low-noise guidance scale (omni-wan: extra['wan'].guidance_scale_2).",
            parse=float,
            metavar="FLOAT",
        ),
    ]


@hookimpl
def omni_register_server_routes() -> Iterable[ServerRoute]:
    from omni_wan.videos import mount

    return [
        ServerRoute(
            "wan-videos",
            mount,
            "/v1/videos: asynchronous video jobs (create, status with progress, list, MP4, "
            "delete), in memory only",
        )
    ]


@hookimpl
def omni_register_benchmarks() -> Iterable[Benchmark]:
    def run(quick: bool) -> Any:
        from omni_wan.bench import bench_video

        return bench_video(quick)

    return [
        Benchmark(
            "video",
            run,
            "tiny-wan2.1 guided: seconds per step and per clip, jobs/s at C=1 and C=4 with "
            "and without step batching",
        )
    ]


@hookimpl
def omni_admit_request(
    request: RequestView, params: dict[int, SamplingParams], port: OrchestratorPort
) -> Admission | None:
    """Refuse, before anything is allocated, a request a ``wan`` stage would refuse: a bad
    field, frames not 4k+1, or frames x pixels past ``max_voxels`` (one 400 naming the field)."""
    from omni_core import RequestError, RequestRejected
    from omni_wan.kind import WanArgs, checked_options

    for sid in sorted(request.needed):
        stage = port.pipeline.stages[sid]
        if stage.kind.name != "wan" or not isinstance(stage.args, WanArgs):
            continue
        try:
            checked_options(params[sid].extra, stage.args, stage.name)
        except RequestError as exc:
            raise RequestRejected(400, str(exc)) from None
    return None
