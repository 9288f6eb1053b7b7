"""``GET /v1/models``: the one model this server serves (vLLM's model card)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from fastapi import APIRouter

from omni_core.serve.context import ServeContext


def max_model_len(stage: Any) -> int | None:
    """The first stage's context length (a vllm stage's ``max_model_len``), for /v1/models."""
    if stage.config.kind != "vllm":
        return None
    from omni_core.kinds.vllm_kind import VllmArgs

    value = stage.config.engine_args.get("max_model_len")
    return int(value) if value is not None else VllmArgs.model_fields["max_model_len"].default


def models_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    started = int(time.time())
    first_stage = ctx.first_stage
    card = {
        "id": ctx.model_id,
        "object": "model",
        "created": started,
        "owned_by": "omni-core",
        "root": str(first_stage.config.engine_args.get("model") or ctx.model_id),
        "parent": None,
        "max_model_len": max_model_len(first_stage),
    }

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        permission = {
            "id": f"modelperm-{secrets.token_hex(16)}",
            "object": "model_permission",
            "created": started,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        return {"object": "list", "data": [{**card, "permission": [permission]}]}

    return router
