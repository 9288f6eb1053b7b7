"""The bodies of ``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (the
fields of its multipart form; its image files are the route's)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from omni_core.serve.errors import ApiError
from omni_core.serve.protocol.base import _Body


class ImageRequest(_Body):
    prompt: str = Field(min_length=1)
    model: str | None = None
    n: int = Field(default=1, ge=1)
    size: str | None = None
    response_format: Literal["b64_json"] = "b64_json"
    output_format: Literal["png", "jpeg", "webp"] = "png"
    seed: int | None = None
    num_inference_steps: int | None = Field(default=None, ge=1)
    extra: dict[str, Any] | None = None  # request-level params.extra (a plugin's options)

    def overrides(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n} if self.n != 1 else {}
        if self.seed is not None:
            out["seed"] = self.seed
        return out

    def stage_extra(self) -> dict[str, Any]:
        """Request-level ``extra`` of every stage: the body's ``extra``, with ``size`` and
        ``num_inference_steps`` as the generic image options (``extra[IMAGE_OPTIONS]``: width,
        height, steps; :mod:`omni_core.media`); the seed is every stage's ``params.seed`` (the
        route sets it)."""
        from omni_core.media import IMAGE_OPTIONS, image_options

        out: dict[str, Any] = dict(self.extra or {})
        size = None if self.size == "auto" else self.size  # auto: the pipeline's own size
        try:
            image = image_options(size, self.num_inference_steps)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="size") from None
        if image:
            out[IMAGE_OPTIONS] = {**_mapping(out.get(IMAGE_OPTIONS)), **image}
        return out


def _mapping(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(400, f"extra: {value!r} is not an object", param="extra")
    return value


class ImageEditRequest(ImageRequest):
    """``POST /v1/images/edits``'s form fields (OpenAI's; ``image``, ``image[]`` and ``mask``
    are file parts the route reads). ``extra`` arrives as a JSON string."""

    @model_validator(mode="before")
    @classmethod
    def _extra_json(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("extra"), str):
            import json

            try:
                data = {**data, "extra": json.loads(data["extra"])}
            except ValueError:
                raise ApiError(400, "extra: not a JSON object", param="extra") from None
        return data
