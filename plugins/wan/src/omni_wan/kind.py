"""The ``wan`` stage kind: Wan's DiT(s) + UniPC scheduler + VAE on prompt embeddings (cheap to
import: the engine, :mod:`omni_wan.engine`, runs in the replica's process)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from omni_core.extend import ProcessStageClient, StageContext, process_client, resolve_model

SECTION = "wan"  # a request's options: SamplingParams.extra["wan"]
MULTIPLE = 16  # height and width: multiples of the VAE's 8 x the patch's 2
MAX_STEPS = 1000
MAX_FRAMES = 1001
DEFAULT_MAX_VOXELS = 33 * 256 * 256  # frames x height x width of one sample, at most


class WanArgs(BaseModel):
    """``engine_args`` of a ``wan`` stage."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="tiny-wan2.1",
        description="a WanPipeline folder: a registered model's name (built on first use) or a "
        "local path; its transformer(s), VAE and scheduler are loaded",
    )
    steps: int = Field(default=50, ge=1, le=MAX_STEPS, description="denoising steps per video")
    height: int = Field(default=480, ge=MULTIPLE, multiple_of=MULTIPLE, description="pixels")
    width: int = Field(default=832, ge=MULTIPLE, multiple_of=MULTIPLE, description="pixels")
    num_frames: int = Field(default=81, ge=1, le=MAX_FRAMES, description="4k+1 frames")
    fps: int = Field(default=16, ge=1, le=120, description="frames per second of the MP4")
    max_voxels: int = Field(
        default=DEFAULT_MAX_VOXELS,
        ge=MULTIPLE * MULTIPLE,
        description="largest num_frames x height x width of a request (refused past it: 400)",
    )
    guidance_scale_2: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="Wan 2.2's low-noise guidance scale (unset: the request's guidance scale)",
    )
    threads: int = Field(default=1, ge=1, description="torch threads of this replica")
    seed: int = Field(default=0, description="noise seed when a request gives none")
    max_batch: int = Field(
        default=8,
        ge=1,
        description="transformer rows per forward (conditionings of running samples of one "
        "shape and expert go together); 1: exactly the pipeline's calls",
    )
    env: dict[str, str] = Field(default_factory=dict, description="replica environment")
    start_timeout_s: float = Field(default=600.0, gt=0, description="seconds to load")

    @model_validator(mode="after")
    def _sizes(self) -> WanArgs:
        check_frames(self.num_frames, "num_frames")
        voxels = self.num_frames * self.height * self.width
        if voxels > self.max_voxels:
            raise ValueError(
                f"num_frames x height x width = {voxels}, over max_voxels={self.max_voxels}"
            )
        return self


def check_frames(frames: int, where: str) -> None:
    if frames % 4 != 1:
        raise ValueError(f"{where}: {frames} frames; Wan needs 4k+1 (e.g. {frames // 4 * 4 + 1})")


class WanOptions(BaseModel):
    """A request's ``extra["wan"]`` (a bad value: one 400 naming the field)."""

    model_config = ConfigDict(extra="forbid")

    steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    height: int | None = Field(default=None, ge=MULTIPLE, multiple_of=MULTIPLE)
    width: int | None = Field(default=None, ge=MULTIPLE, multiple_of=MULTIPLE)
    num_frames: int | None = Field(default=None, ge=1, le=MAX_FRAMES)
    fps: int | None = Field(default=None, ge=1, le=120)
    guidance_scale_2: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, lt=2**63)


def checked_options(extra: dict[str, Any], args: WanArgs, stage: str) -> tuple[WanOptions, int]:
    """The request's options with the stage's defaults filled in, and its frames x pixels;
    past the stage's ``max_voxels`` (or frames not 4k+1): one RequestError (400) naming the
    field. Cheap: runs at admission and again in the replica."""
    from omni_core import RequestError

    try:
        options = WanOptions.model_validate(extra.get(SECTION) or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"extra['{SECTION}']" + "".join(f".{x}" for x in first["loc"])
        raise RequestError(f"{where}: {first['msg']}", param=where) from None
    filled = WanOptions(
        steps=options.steps or args.steps,
        height=options.height or args.height,
        width=options.width or args.width,
        num_frames=options.num_frames or args.num_frames,
        fps=options.fps or args.fps,
        guidance_scale_2=_pick(options.guidance_scale_2, args.guidance_scale_2),
        seed=options.seed,
    )
    assert filled.num_frames and filled.height and filled.width
    try:
        check_frames(filled.num_frames, f"extra['{SECTION}'].num_frames")
    except ValueError as exc:
        raise RequestError(str(exc), param=f"extra['{SECTION}'].num_frames") from None
    voxels = filled.num_frames * filled.height * filled.width
    if voxels > args.max_voxels:
        raise RequestError(
            f"extra['{SECTION}'].num_frames x height x width: {filled.num_frames}x"
            f"{filled.height}x{filled.width} = {voxels}, at most {args.max_voxels} "
            f"(stage '{stage}' engine_args.max_voxels)",
            param=f"extra['{SECTION}'].num_frames",
        )
    return filled, voxels


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


INSTALL = (
    "pip install --no-deps -r requirements/qwen-image.txt -r requirements/wan.txt (./setup.sh does)"
)


def require_diffusers(where: str) -> None:
    import importlib.util

    from omni_core import ConfigError

    if importlib.util.find_spec("diffusers") is None:
        raise ConfigError([f"{where} needs diffusers, which is not installed: {INSTALL}"])


def make_wan_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    require_diffusers(f"stage '{stage.name}' (kind 'wan')")
    args = WanArgs.model_validate(stage.engine_args)
    config = {
        "factory": "omni_wan.engine:build",
        "model": resolve_model(args.model, context),
        "args": args.model_dump(),
        "stage": stage.name,
    }
    return process_client(
        stage, replica, context, config, args.threads, args.env, args.start_timeout_s
    )
