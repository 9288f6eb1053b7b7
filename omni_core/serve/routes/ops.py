"""The operator's routes: ``GET /health`` (open; detail only for authorized callers) and
``GET /metrics`` (Prometheus text; open with ``OMNI_PUBLIC_METRICS``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from omni_core.serve.context import ServeContext


def ops_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    engine, metrics = ctx.engine, ctx.metrics

    @router.get("/health")
    async def health(request: Request) -> JSONResponse:
        status = engine.health()
        ok = status["alive"] and all(s["live"] for s in status["stages"].values())
        if not request.scope["state"].get("authorized"):  # no detail for anonymous callers
            status = {"status": "ok" if ok else "unavailable"}
        return JSONResponse(status, status_code=200 if ok else 503)

    @router.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(metrics.render(engine), media_type="text/plain; version=0.0.4")

    return router
