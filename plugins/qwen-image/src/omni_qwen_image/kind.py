"""The ``diffusers`` stage kind: its configuration and replica client (cheap to import).

The engine (:mod:`omni_qwen_image.engine`) runs in the replica's process; nothing here imports
torch or diffusers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_core.extend import ProcessStageClient, StageContext, process_client, resolve_model

SECTION = "diffusers"  # a request's options: SamplingParams.extra["diffusers"]
MULTIPLE = 16  # Qwen-Image's height and width: multiples of 2 * the VAE's scale factor (8)
MAX_STEPS = 1000  # a request's denoising steps (the scheduler's training range)
MAX_SIDE = 4096  # an image side in pixels, at most (Qwen-Image's largest trained size is ~1664)
# a stage's default max_pixels: 1024x1024, sized to a 24 GiB CPU host (docs/security.md)
DEFAULT_MAX_PIXELS = 1024 * 1024


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
    max_side: int = Field(
        default=MAX_SIDE,
        ge=MULTIPLE,
        le=MAX_SIDE,
        description="largest height or width in pixels (this stage's own and a request's)",
    )
    max_pixels: int = Field(
        default=DEFAULT_MAX_PIXELS,
        ge=MULTIPLE * MULTIPLE,
        description="largest height x width (this stage's own and a request's): one sample's "
        "memory grows with it; past it a request is refused at admission (400)",
    )
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
    condition_area: int = Field(
        default=DEFAULT_MAX_PIXELS,
        ge=32 * 32,
        description="an edit pipeline (QwenImageEditPipeline folder): the input image is "
        "resized to about this many pixels, its aspect ratio kept, sides multiples of 32 "
        "(diffusers' calculate_dimensions(1024*1024)), and that is the output's default size; "
        "at most max_pixels",
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
        if max(self.height, self.width) > self.max_side:
            raise ValueError(
                f"height x width: {self.height}x{self.width}, a side over max_side={self.max_side}"
            )
        if self.condition_area > self.max_pixels:
            raise ValueError(
                f"condition_area: {self.condition_area} pixels, over max_pixels={self.max_pixels}"
            )
        if self.height * self.width > self.max_pixels:
            raise ValueError(
                f"height x width: {self.height}x{self.width} = {self.height * self.width} pixels, "
                f"over max_pixels={self.max_pixels} (raise max_pixels for a larger default)"
            )
        return self


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


def request_options(extra: dict[str, Any]) -> DiffusersOptions:
    """The request's options: the generic image options (``extra["image"]``) under this kind's
    own (``extra["diffusers"]``, which wins field by field); a bad value is one 400 naming the
    section and field."""
    from pydantic import ValidationError

    from omni_core import RequestError
    from omni_core.extend import IMAGE_OPTIONS

    merged: dict[str, Any] = {}
    model: type[BaseModel]
    for section, model in ((IMAGE_OPTIONS, ImageRequestOptions), (SECTION, DiffusersOptions)):
        value = extra.get(section) or {}
        try:
            options = model.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = f"extra['{section}']" + "".join(f".{x}" for x in first["loc"])
            raise RequestError(f"{where}: {first['msg']}", param=where) from None
        merged.update(options.model_dump(exclude_none=True))
    return DiffusersOptions.model_validate(merged)


def checked_options(
    extra: dict[str, Any], args: DiffusersArgs, stage: str
) -> tuple[DiffusersOptions, int, int]:
    """A request's options (:func:`request_options`) and its image's height and width on a stage
    with these ``args`` (the options over the stage's own). Past the stage's ``max_side`` or
    ``max_pixels``: one RequestError (400) naming the fields and the limit. Cheap: runs at
    admission, before anything is allocated (and again in the replica)."""
    from omni_core import RequestError
    from omni_core.extend import IMAGE_OPTIONS

    options = request_options(extra)
    height = options.height or args.height
    width = options.width or args.width

    def where(field: str) -> str:
        for section in (SECTION, IMAGE_OPTIONS):
            value = extra.get(section)
            if isinstance(value, dict) and value.get(field) is not None:
                return f"extra['{section}'].{field}"
        return f"stage '{stage}' engine_args.{field}"

    for field, value in (("height", height), ("width", width)):
        if value > args.max_side:
            raise RequestError(
                f"{where(field)}: {value} pixels, at most {args.max_side} "
                f"(stage '{stage}' engine_args.max_side)",
                param=where(field),
            )
    if height * width > args.max_pixels:
        fields = f"{where('width')} x {where('height')}"
        raise RequestError(
            f"{fields}: {width}x{height} = {height * width} pixels, at most {args.max_pixels} "
            f"(stage '{stage}' engine_args.max_pixels)",
            param=where("width") if options.width else where("height"),
        )
    return options, height, width


INSTALL = "pip install --no-deps -r requirements/qwen-image.txt (./setup.sh does)"


def require_diffusers(where: str) -> None:
    """diffusers is installed, else one ConfigError naming ``where`` and how to install it (it
    is not a declared dependency: pip must not resolve it against the CPU torch)."""
    import importlib.util

    from omni_core import ConfigError

    if importlib.util.find_spec("diffusers") is None:
        raise ConfigError([f"{where} needs diffusers, which is not installed: {INSTALL}"])


def make_diffusers_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    require_diffusers(f"stage '{stage.name}' (kind 'diffusers')")
    args = DiffusersArgs.model_validate(stage.engine_args)
    config = {
        "factory": "omni_qwen_image.engine:build",
        "model": resolve_model(args.model, context),
        "args": args.model_dump(),
        "stage": stage.name,
    }
    return process_client(
        stage, replica, context, config, args.threads, args.env, args.start_timeout_s
    )
