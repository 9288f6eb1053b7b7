"""The FastAPI app of ``omni serve``: composition only.

``create_app`` builds the app's :class:`~omni_core.serve.context.ServeContext` (the engine
handle, settings, admission, drain and the request checks every route shares), adds the guard
middleware and the error handlers, includes one router per resource
(:mod:`omni_core.serve.routes`: models, health and metrics, chat completions, completions,
images; :mod:`omni_core.serve.tokenize`: version, tokenize), then mounts the plugins' routes.
A new resource's router goes in :mod:`omni_core.serve.routes` and is included here.

Every body is parsed by :mod:`omni_core.serve.protocol` and validated (sampling params, prompt
length, modalities) before a request reaches the engine; the heavy steps of a request run in
worker threads, never on the server's event loop.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from omni_core.errors import RequestError
from omni_core.serve.context import ServeContext
from omni_core.serve.errors import ApiError
from omni_core.serve.guard import BodyTimeout, BodyTooLarge, Guard, late_body, too_large_body
from omni_core.serve.metrics import OmniMetrics
from omni_core.serve.routes.chat import chat_router
from omni_core.serve.routes.completions import completions_router
from omni_core.serve.routes.images import images_router
from omni_core.serve.routes.models import models_router
from omni_core.serve.routes.ops import ops_router
from omni_core.serve.runs import ClientGone
from omni_core.serve.tokenize import tokenizer_router, version_router

logger = logging.getLogger(__name__)


def create_app(
    engine: Any,
    metrics: OmniMetrics,
    *,
    api_key: str | None = None,
    max_inflight: int = 64,
    public_metrics: bool | None = None,
) -> FastAPI:
    ctx = ServeContext.of(engine, metrics, max_inflight)
    settings = ctx.settings
    app = FastAPI(title="omni-core", docs_url=None, redoc_url=None)
    app.state.engine = engine
    app.state.admission = ctx.admission
    app.state.drain = ctx.drain  # the server begins it when it shuts down
    public = settings.public_metrics if public_metrics is None else public_metrics
    open_paths = {"/health"} | ({"/metrics", "/openapi.json"} if public else set())
    app.add_middleware(
        Guard,
        api_key=api_key,
        max_body_bytes=settings.max_body_bytes,
        open_paths=frozenset(open_paths),
        read_timeout_s=settings.read_timeout_s,
        write_timeout_s=settings.write_timeout_s,
    )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return ApiError(exc.status_code, str(exc), param=exc.param).response()

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge) -> Response:
        status, body = too_large_body(exc)
        return Response(body, status_code=status, media_type="application/json")

    @app.exception_handler(BodyTimeout)
    async def _late(request: Request, exc: BodyTimeout) -> Response:
        status, body = late_body(exc)
        logger.info("%s: %s (OMNI_READ_TIMEOUT_S)", request.url.path, exc)
        headers = {"Connection": "close"}  # the rest of the body is not read
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        logger.info("%s: the client went away; its request was aborted", request.url.path)
        return Response(status_code=499)  # nobody reads it

    # one router per resource (omni_core.serve.routes); the order is the app's route order
    for router in (models_router, ops_router, chat_router, completions_router, images_router):
        app.include_router(router(ctx))
    app.include_router(version_router())
    tokens = tokenizer_router(
        ctx.renderer, lambda model: ctx.check_model(model or ctx.model_id), settings.max_json_depth
    )
    if tokens is not None:
        app.include_router(tokens)

    from omni_core.plugin.hooks import PluginHost

    host: PluginHost = engine.plugins
    core_routes = len(app.routes)
    for route in host.server_routes():
        route.mount(app, engine)
    ctx.plugin_paths.extend(
        sorted({getattr(r, "path", "") for r in app.routes[core_routes:]} - {""})
    )
    return app
