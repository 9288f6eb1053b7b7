"""The ``diffusers`` stage kind: its configuration and replica client (cheap to import).

The engine (:mod:`omni_qwen_image.engine`) runs in the replica's process; nothing here imports
torch or diffusers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_core.kinds.torch_kind import process_client, resolve_model
from omni_core.stage.client import StageContext
from omni_core.stage.process import ProcessStageClient

SECTION = "diffusers"  # a request's options: SamplingParams.extra["diffusers"]
MULTIPLE = 16  # Qwen-Image's height and width: multiples of 2 * the VAE's scale factor (8)


class DiffusersArgs(BaseModel):
    """``engine_args`` of a ``diffusers`` stage."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="tiny-qwen-image",
        description="a QwenImagePipeline folder: a registered model's name (built on first "
        "use) or a local path; its transformer, VAE and scheduler are loaded",
    )
    steps: int = Field(default=50, ge=1, description="denoising steps per sample")
    height: int = Field(default=1024, ge=MULTIPLE, multiple_of=MULTIPLE, description="pixels")
    width: int = Field(default=1024, ge=MULTIPLE, multiple_of=MULTIPLE, description="pixels")
    true_cfg_scale: float = Field(
        default=4.0,
        ge=0,
        allow_inf_nan=False,
        description="guidance scale for a prompt that carries its own negative_prompt_embeds "
        "(guidance through omni-cfg takes the request's weights instead)",
    )
    preview_every: int | None = Field(
        default=None, ge=1, description="stream a preview image every k steps (unset: none)"
    )
    dtype: str = Field(default="float32", description="torch dtype: float32 or bfloat16")
    device: str = Field(
        default="cpu", description="torch device of the models and latents (e.g. cuda)"
    )
    threads: int = Field(default=1, ge=1, description="torch threads of this replica")
    seed: int = Field(default=0, description="noise seed when a request gives none")
    max_batch: int = Field(
        default=8,
        ge=1,
        description="transformer rows per forward: the conditionings of running samples of one "
        "size go together (texts padded and masked); 1: one call per conditioning, exactly "
        "the pipeline's calls",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables of the replica's process"
    )
    start_timeout_s: float = Field(
        default=600.0, description="seconds a replica may take to load before it counts as failed"
    )

    @model_validator(mode="after")
    def _dtype(self) -> DiffusersArgs:
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype: {self.dtype!r} is not float32 or bfloat16")
        return self


MAX_STEPS = 1000  # a request's denoising steps (the scheduler's training range)
MAX_SIDE = 4096  # a request's image side in pixels (Qwen-Image's largest trained size is ~1664)


class ImageRequestOptions(BaseModel):
    """A request's generic image options (``extra["image"]``, :data:`omni_core.media.IMAGE_OPTIONS`:
    what ``omni run --size/--steps`` and the images route set), as this kind bounds them."""

    model_config = ConfigDict(extra="forbid")

    steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    height: int | None = Field(default=None, ge=MULTIPLE, le=MAX_SIDE, multiple_of=MULTIPLE)
    width: int | None = Field(default=None, ge=MULTIPLE, le=MAX_SIDE, multiple_of=MULTIPLE)


class DiffusersOptions(ImageRequestOptions):
    """A request's ``extra["diffusers"]``: this kind's own options, over the generic image
    options (a pydantic ValidationError is a ValueError: 400)."""

    true_cfg_scale: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    preview_every: int | None = Field(default=None, ge=0, description="0: no previews")
    seed: int | None = Field(
        default=None, ge=0, lt=2**63, description="noise seed (over params.seed)"
    )


INSTALL = "pip install --no-deps -r requirements/qwen-image.txt (./setup.sh does)"


def require_diffusers(where: str) -> None:
    """diffusers is installed, else one ConfigError naming ``where`` and how to install it (it
    is not a declared dependency: pip must not resolve it against the CPU torch)."""
    import importlib.util

    from omni_core.errors import ConfigError

    if importlib.util.find_spec("diffusers") is None:
        raise ConfigError([f"{where} needs diffusers, which is not installed: {INSTALL}"])


def make_diffusers_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    require_diffusers(f"stage '{stage.name}' (kind 'diffusers')")
    args = DiffusersArgs.model_validate(stage.engine_args)
    config = {
        "factory": "omni_qwen_image.engine:build",
        "model": resolve_model(args.model, context.settings.cache_dir),
        "args": args.model_dump(),
    }
    return process_client(
        stage, replica, context, config, args.threads, args.env, args.start_timeout_s
    )
