"""``POST /v1/images/generations``: ``n`` images from a prompt; ``POST /v1/images/edits``: ``n``
images from a prompt and one or more input images (OpenAI's multipart form). Both return base64
images (``output_format`` png, jpeg or webp), each child of ``n`` seeded ``seed + i``.

An edit's input images are decoded here, each checked against the media budget from its header
before a pixel is decoded (:mod:`omni_core.chat_media`: 413 over ``OMNI_MAX_IMAGE_PIXELS`` or
``OMNI_MAX_MEDIA_FILE_BYTES``, 400 for a file that is not an image), and reach the pipeline as
the prompt ``{"prompt": text, "multi_modal_data": {"image": RGB image (a list for several)}}``.
A ``mask`` (inpainting) is refused: no served family inpaints.
"""

from __future__ import annotations

import base64
import io
import secrets
import time
from typing import Any

import msgspec
from fastapi import APIRouter, Request

from omni_core.chat import RenderedPrompt
from omni_core.errors import RequestError
from omni_core.media import Image, png_bytes
from omni_core.serve.bodies import parse_body
from omni_core.serve.context import ServeContext, off_loop
from omni_core.serve.errors import ApiError
from omni_core.serve.protocol import ImageEditRequest, ImageRequest
from omni_core.serve.runs import Run

IMAGE_PARTS = ("image", "image[]")  # the SDK sends one file as image, several as image[]
MAX_FORM_FILES = 16  # OpenAI's most input images


def images_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    engine, model_id = ctx.engine, ctx.model_id

    async def respond(request: Request, body: ImageRequest, prompt: Any) -> dict[str, Any]:
        ctx.check_model(body.model or model_id)
        if "image" not in ctx.offered:
            raise ApiError(400, f"model '{model_id}' does not generate images", param="model")
        params = ctx.stage_params(body.overrides(), body.stage_extra())
        seed = body.seed
        if seed is None and body.n > 1:  # n different images: children sample with seed + i
            seed = secrets.randbits(62)
        if seed is not None:  # every stage's seed, so that child i of n gets seed + i
            params = {
                name: msgspec.structs.replace(p, seed=seed)
                for name, p in engine.request_params(params).items()
            }
        rendered = RenderedPrompt(prompt, body.prompt, None)
        run = Run(request, engine, ctx.admission, rendered, params, ["image"], ctx.drain)
        outputs = await run.collect()
        images = [o.payload for o in outputs if isinstance(o.payload, Image) and o.finish_reason]
        fmt = body.output_format
        data = await off_loop(
            lambda: [{"b64_json": base64.b64encode(encoded(im, fmt)).decode()} for im in images]
        )
        return {"created": int(time.time()), "data": data, "output_format": fmt}

    @router.post("/v1/images/generations")
    async def images(request: Request) -> Any:
        body = await ctx.body_of(request, ImageRequest)
        return await respond(request, body, body.prompt)

    @router.post("/v1/images/edits")
    async def edits(request: Request) -> Any:
        body, files = await edit_form(request)
        pictures = await off_loop(lambda: decode_parts(files, ctx.settings))
        image = pictures[0] if len(pictures) == 1 else pictures
        prompt = {"prompt": body.prompt, "multi_modal_data": {"image": image}}
        return await respond(request, body, prompt)

    return router


async def edit_form(request: Request) -> tuple[ImageEditRequest, list[tuple[str, bytes]]]:
    """The edit form's fields as :class:`ImageEditRequest` and its image files as (part, bytes);
    one 400 naming the part for anything else."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "the body must be multipart/form-data (image files and fields)")
    try:
        form = await request.form(max_files=MAX_FORM_FILES + 1, max_fields=64)
    except Exception as exc:  # a malformed form (Starlette's MultiPartException, ...)
        raise ApiError(400, f"the body is not a readable multipart form: {exc}") from None
    fields: dict[str, str] = {}
    uploads = []
    for key, value in form.multi_items():
        if key == "mask":
            raise ApiError(
                400,
                "mask: inpainting is not supported by this model; edit without a mask",
                param="mask",
            )
        if isinstance(value, str):
            if key in IMAGE_PARTS:
                raise ApiError(400, f"{key}: must be an image file, not a text field", param=key)
            if key in fields:
                raise ApiError(400, f"{key}: given more than once", param=key)
            fields[key] = value
        elif key in IMAGE_PARTS:
            uploads.append(value)
        else:
            raise ApiError(400, f"{key}: unexpected file part", param=key)
    if not uploads:
        raise ApiError(400, "image: required (one or more image files)", param="image")
    if len(uploads) > MAX_FORM_FILES:
        raise ApiError(400, f"image: at most {MAX_FORM_FILES} files", param="image")
    body = parse_body(ImageEditRequest, fields)
    name = "image" if len(uploads) == 1 else "image[{}]"
    files = [(name.format(i), await upload.read()) for i, upload in enumerate(uploads)]
    return body, files


def decode_parts(files: list[tuple[str, bytes]], settings: Any) -> list[Any]:
    """Each part as an RGB Pillow image: its size and declared pixels within the media budget
    (413), a readable image (400), each error naming the part."""
    from omni_core.chat_media import MediaBudget, _open_image, _too_large

    budget = MediaBudget.from_settings(settings)
    images = []
    try:
        for where, raw in files:
            if len(raw) > budget.file_bytes:
                raise _too_large(
                    where,
                    "the file is too large",
                    f"{budget.file_bytes} bytes",
                    "OMNI_MAX_MEDIA_FILE_BYTES",
                )
            images.append(_open_image(raw, where, budget).convert("RGB"))
    except RequestError as exc:
        raise ApiError(exc.status_code, str(exc), param=exc.param) from None
    return images


def encoded(image: Image, fmt: str) -> bytes:
    """An output image as ``fmt`` (png: the core's own writer; jpeg, webp: Pillow)."""
    if fmt == "png":
        return png_bytes(image)
    import numpy as np
    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.fromarray(np.asarray(image.pixels, dtype=np.uint8)).save(out, format=fmt.upper())
    return out.getvalue()
