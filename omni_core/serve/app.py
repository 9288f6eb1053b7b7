"""The FastAPI app: OpenAI-style chat completions and images, models, health, metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from omni_core.errors import EngineDeadError, RequestError
from omni_core.media import AudioChunk, Image, pcm16, png_bytes, wav_bytes
from omni_core.outputs import OmniRequestOutput
from omni_core.serve.errors import ApiError, from_error_info
from omni_core.serve.metrics import OmniMetrics


class Admission:
    """Bounded in-flight requests: past the bound, callers get 429 with ``Retry-After``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0

    def enter(self) -> None:
        if self.inflight >= self.limit:
            raise ApiError(
                429,
                f"the server is at its limit of {self.limit} in-flight requests",
                "rate_limit_exceeded",
                code="too_many_requests",
                headers={"Retry-After": "1"},
            )
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1


def create_app(
    engine: Any, metrics: OmniMetrics, *, api_key: str | None = None, max_inflight: int = 64
) -> FastAPI:
    app = FastAPI(title="omni-core", docs_url=None, redoc_url=None)
    app.state.engine = engine
    admission = Admission(max_inflight)
    app.state.admission = admission
    model_id = engine.pipeline.config.name
    stages = engine.pipeline.stages
    offered = {s.config.final_output_type for s in stages.values() if s.config.final_output}
    # An engine kind without a request API (``generate``) is served only by its plugins' routes.
    answers_requests = callable(getattr(engine, "generate", None))
    plugin_paths: list[str] = []

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    def authorize(request: Request) -> None:
        if api_key and request.headers.get("authorization") != f"Bearer {api_key}":
            raise ApiError(
                401, "invalid or missing API key", "authentication_error", code="invalid_api_key"
            )

    def check_model(model: Any) -> None:
        if model != model_id:
            raise ApiError(
                404,
                f"The model '{model}' does not exist (this server: '{model_id}')",
                param="model",
                code="model_not_found",
            )
        if not answers_requests:
            where = ", ".join(plugin_paths) or "no other route"
            raise ApiError(
                400,
                f"model '{model_id}' (engine '{engine.pipeline.config.engine}') does not answer "
                f"single requests; this server offers it at: {where}",
                param="model",
                code="unsupported_endpoint",
            )

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        authorize(request)
        return {
            "object": "list",
            "data": [{"id": model_id, "object": "model", "owned_by": "omni-core", "created": 0}],
        }

    @app.get("/health")
    async def health() -> JSONResponse:
        status = engine.health()
        ok = status["alive"] and all(s["live"] for s in status["stages"].values())
        return JSONResponse(status, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(metrics.render(engine), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        authorize(request)
        body = await _json(request)
        check_model(body.get("model"))
        modalities = body.get("modalities") or ["text"]
        if not isinstance(modalities, list) or not set(modalities) <= offered:
            raise ApiError(
                400,
                f"modalities {modalities!r}: this model offers {sorted(offered)}",
                param="modalities",
            )
        prompt = _prompt(body.get("messages"))
        params = _params(engine, body)
        admission.enter()
        try:
            if body.get("stream"):
                return StreamingResponse(
                    _chat_stream(engine, admission, prompt, params, modalities, model_id),
                    media_type="text/event-stream",
                )
        except BaseException:
            admission.leave()
            raise
        try:
            outputs = await _collect(request, engine, prompt, params, modalities)
        finally:
            admission.leave()
        return _chat_response(outputs, modalities, model_id, body.get("n") or 1)

    @app.post("/v1/images/generations")
    async def images(request: Request) -> Any:
        authorize(request)
        body = await _json(request)
        check_model(body.get("model", model_id))
        if "image" not in offered:
            raise ApiError(400, f"model '{model_id}' does not generate images", param="model")
        if body.get("response_format", "b64_json") != "b64_json":
            raise ApiError(
                400,
                "only response_format 'b64_json' is supported (no image URLs)",
                param="response_format",
            )
        if not isinstance(body.get("prompt"), str) or not body["prompt"]:
            raise ApiError(400, "'prompt' must be a non-empty string", param="prompt")
        params = _params(engine, body)
        admission.enter()
        try:
            outputs = await _collect(request, engine, body["prompt"], params, ["image"])
        finally:
            admission.leave()
        images = [o.payload for o in outputs if isinstance(o.payload, Image) and o.finish_reason]
        data = []
        for image in images:
            data.append({"b64_json": base64.b64encode(png_bytes(image)).decode()})
        return {"created": int(time.time()), "data": data}

    from omni_core.plugin.hooks import PluginHost

    host: PluginHost = engine.plugins
    core_routes = len(app.routes)
    for route in host.server_routes():
        route.mount(app, engine)
    plugin_paths.extend(sorted({getattr(r, "path", "") for r in app.routes[core_routes:]} - {""}))
    return app


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _prompt(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "content" not in message:
            raise ApiError(400, f"messages[{i}] needs 'role' and 'content'", param=f"messages[{i}]")
        content = message["content"]
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(str(content))
    return "\n".join(parts)


def _params(engine: Any, body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI fields → the first stage's sampling params (over its pipeline defaults)."""
    overrides: dict[str, Any] = {}
    for field in ("max_tokens", "temperature", "seed", "n"):
        if body.get(field) is not None:
            overrides[field] = body[field]
    if body.get("max_completion_tokens") is not None:
        overrides["max_tokens"] = body["max_completion_tokens"]
    stop = body.get("stop")
    if stop is not None:
        overrides["stop"] = [stop] if isinstance(stop, str) else stop
    if not overrides:
        return None
    first = engine.pipeline.stages[min(engine.pipeline.stages)]
    return {first.name: {**first.config.sampling_params, **overrides}}


async def _generate(
    engine: Any, prompt: str, params: Any, modalities: list[str]
) -> AsyncIterator[OmniRequestOutput]:
    try:
        async for out in engine.generate(prompt, sampling_params=params, modalities=modalities):
            if out.error is not None:
                raise from_error_info(out.error)
            yield out
    except RequestError as exc:
        raise ApiError(400, str(exc), param=_param_of(str(exc))) from None
    except EngineDeadError as exc:
        raise ApiError(503, str(exc), "service_unavailable", code="engine_dead") from None


def _param_of(message: str) -> str | None:
    for field in ("max_tokens", "temperature", "seed", "n", "stop"):
        if f".{field}" in message or f"'{field}'" in message:
            return field
    return None


async def _collect(
    request: Request, engine: Any, prompt: str, params: Any, modalities: list[str]
) -> list[OmniRequestOutput]:
    """Run a request to its end; a client disconnect cancels it (which aborts it)."""

    async def run() -> list[OmniRequestOutput]:
        return [o async for o in _generate(engine, prompt, params, modalities)]

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work = asyncio.ensure_future(run())
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()  # closing the generator aborts the request in the engine
    return await work


def _text_of(outputs: list[OmniRequestOutput], index: int) -> tuple[str, str | None]:
    text = "".join(o.text for o in outputs if o.index == index and o.output_type == "text")
    reasons = [
        o.finish_reason
        for o in outputs
        if o.index == index and o.finish_reason and o.output_type == "text"
    ]
    return text, reasons[-1] if reasons else None


def _chat_response(
    outputs: list[OmniRequestOutput], modalities: list[str], model: str, n: int
) -> dict[str, Any]:
    choices = []
    completion_tokens = 0
    for index in range(n):
        text, reason = _text_of(outputs, index)
        completion_tokens += sum(
            len(o.token_ids) for o in outputs if o.index == index and o.output_type == "text"
        )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if "audio" in modalities:
            chunks = [
                o.payload for o in outputs if o.index == index and isinstance(o.payload, AudioChunk)
            ]
            if chunks:
                message["audio"] = {
                    "id": f"audio-{uuid.uuid4().hex[:12]}",
                    "data": base64.b64encode(wav_bytes(chunks)).decode(),
                    "transcript": text,
                    "expires_at": int(time.time()) + 3600,
                }
                if "text" not in modalities:
                    message["content"] = None
            audio_reasons = [
                o.finish_reason
                for o in outputs
                if o.index == index and o.output_type == "audio" and o.finish_reason
            ]
            reason = reason or (audio_reasons[-1] if audio_reasons else None)
        choices.append({"index": index, "message": message, "finish_reason": reason or "stop"})
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": completion_tokens,
            "total_tokens": completion_tokens,
        },
    }


async def _chat_stream(
    engine: Any, admission: Admission, prompt: str, params: Any, modalities: list[str], model: str
) -> AsyncIterator[str]:
    """SSE chunks: text deltas as ``content``, audio as pcm16 ``audio.data`` deltas."""
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    try:
        yield chunk(0, {"role": "assistant", "content": ""})
        reasons: dict[int, str] = {}
        async for out in _generate(engine, prompt, params, modalities):
            if out.output_type == "text" and out.text:
                yield chunk(out.index, {"content": out.text})
            if isinstance(out.payload, AudioChunk):
                pcm = pcm16(out.payload.samples)
                yield chunk(
                    out.index, {"audio": {"data": base64.b64encode(pcm).decode(), "transcript": ""}}
                )
            if out.finish_reason:
                reasons[out.index] = out.finish_reason
        for index, reason in sorted(reasons.items()):
            yield chunk(index, {}, reason)
        yield "data: [DONE]\n\n"
    except ApiError as exc:
        yield f"data: {json.dumps({'error': {'message': exc.message, 'code': exc.code}})}\n\n"
    finally:
        admission.leave()
