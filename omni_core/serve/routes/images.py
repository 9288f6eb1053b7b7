"""``POST /v1/images/generations``: ``n`` images from a prompt (PNG, base64), each child of
``n`` seeded ``seed + i``."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

import msgspec
from fastapi import APIRouter, Request

from omni_core.chat import RenderedPrompt
from omni_core.media import Image, png_bytes
from omni_core.serve.context import ServeContext, off_loop
from omni_core.serve.errors import ApiError
from omni_core.serve.protocol import ImageRequest
from omni_core.serve.runs import Run


def images_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    engine, model_id = ctx.engine, ctx.model_id

    @router.post("/v1/images/generations")
    async def images(request: Request) -> Any:
        body = await ctx.body_of(request, ImageRequest)
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
        rendered = RenderedPrompt(body.prompt, body.prompt, None)
        run = Run(request, engine, ctx.admission, rendered, params, ["image"], ctx.drain)
        outputs = await run.collect()
        images = [o.payload for o in outputs if isinstance(o.payload, Image) and o.finish_reason]
        data = await off_loop(
            lambda: [{"b64_json": base64.b64encode(png_bytes(im)).decode()} for im in images]
        )
        return {"created": int(time.time()), "data": data}

    return router
