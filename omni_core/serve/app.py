"""The FastAPI app: OpenAI chat completions, completions and images, models, health, metrics.

Every body is parsed by :mod:`omni_core.serve.protocol` and validated (sampling params, prompt
length, modalities) before a request reaches the engine, streamed ones before the 200: their
first output is awaited too, so a stage's own rejection still answers with a 4xx.

The heavy steps of a request (decoding and validating its JSON, rendering the chat template,
decoding its media, tokenizing, encoding a whole response's audio or images) run in worker
threads, never on the server's event loop: a large request does not stall other routes.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from omni_core.chat import ChatMessage, RenderedPrompt, TextPart
from omni_core.errors import RequestError
from omni_core.media import Image, png_bytes
from omni_core.serve import streams
from omni_core.serve.bodies import check_json_media_type, decode_json, parse_body
from omni_core.serve.connections import Drain
from omni_core.serve.errors import ApiError
from omni_core.serve.guard import BodyTimeout, BodyTooLarge, Guard, late_body, too_large_body
from omni_core.serve.metrics import OmniMetrics
from omni_core.serve.protocol import ChatCompletionRequest, CompletionRequest, ImageRequest
from omni_core.serve.responses import (
    AudioReply,
    Extras,
    chat_response,
    completion_response,
    gather,
)
from omni_core.serve.runs import Admission, ClientGone, Run, all_of, start_runs
from omni_core.serve.tokenize import tokenizer_router, version_router
from omni_core.serve.tools import ToolCalling, load_parser

logger = logging.getLogger(__name__)

off_loop = asyncio.to_thread  # the heavy steps of a request: in a worker thread


def prompt_chars(messages: list[ChatMessage]) -> int:
    """Characters of prompt text in a chat (string contents and text parts)."""
    total = 0
    for message in messages:
        if isinstance(message.content, str):
            total += len(message.content)
        elif message.content is not None:
            total += sum(len(p.text) for p in message.content if isinstance(p, TextPart))
    return total


def check_prompt_chars(chars: int, limit: int, param: str) -> None:
    if chars > limit:
        raise ApiError(
            400,
            f"'{param}': {chars} characters of prompt text; this server takes at most {limit} "
            "per request (OMNI_MAX_PROMPT_CHARS)",
            param=param,
            code="prompt_too_long",
        )


def max_model_len(stage: Any) -> int | None:
    """The first stage's context length (a vllm stage's ``max_model_len``), for /v1/models."""
    if stage.config.kind != "vllm":
        return None
    from omni_core.kinds.vllm_kind import VllmArgs

    value = stage.config.engine_args.get("max_model_len")
    return int(value) if value is not None else VllmArgs.model_fields["max_model_len"].default


def request_id_of(request: Request, body: Any) -> str | None:
    """The caller's name for the request, as vLLM's server takes it: the ``X-Request-Id`` header,
    else the body's ``request_id``; the response's id is ``chatcmpl-``/``cmpl-`` and it."""
    return request.headers.get("x-request-id") or body.request_id


def with_request_id(response: Response, request: Request) -> Response:
    """The caller's ``X-Request-Id`` echoed on the response (vLLM's request-id headers)."""
    rid = request.headers.get("x-request-id")
    if rid is not None:
        response.headers["X-Request-Id"] = rid
    return response


def extras_of(body: Any) -> Extras:
    return Extras(
        token_ids=bool(body.return_token_ids), prompt_logprobs=body.prompt_logprobs is not None
    )


def create_app(
    engine: Any,
    metrics: OmniMetrics,
    *,
    api_key: str | None = None,
    max_inflight: int = 64,
    public_metrics: bool | None = None,
) -> FastAPI:
    settings = engine.settings
    app = FastAPI(title="omni-core", docs_url=None, redoc_url=None)
    app.state.engine = engine
    admission = Admission(max_inflight)
    app.state.admission = admission
    drain = Drain()
    app.state.drain = drain  # the server begins it when it shuts down
    model_id = engine.pipeline.config.name
    stages = engine.pipeline.stages
    offered = {s.config.final_output_type for s in stages.values() if s.config.final_output}
    first_stage = stages[min(stages)]
    stage_names = {s.name for s in stages.values()}
    stage_name = first_stage.name
    # An engine kind without a request API (``generate``) is served only by its plugins' routes.
    answers_requests = callable(getattr(engine, "generate", None))
    renderer = engine.prompt_renderer if answers_requests else None  # loads a tokenizer once
    parser_name = getattr(renderer, "tool_call_parser", None)
    tool_parser = load_parser(parser_name, first_stage.name) if parser_name else None
    parser_where = f"stage '{first_stage.name}': " + (
        f"'{parser_name}'" if parser_name else "none set"
    )
    plugin_paths: list[str] = []
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

    def stage_params(
        overrides: dict[str, Any],
        extra: dict[str, Any] | None = None,
        later: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        """The request's fields over the first stage's pipeline defaults, ``later`` (a chat's
        ``sampling_params``: later stages' fields by name) over theirs, and its request-level
        ``extra`` (the voice) in every stage's params, validated now."""
        if not overrides and not extra and not later:
            return None
        given: dict[str, Any] = {first_stage.name: overrides} if overrides else {}
        for name, fields in (later or {}).items():
            if name == first_stage.name or name not in stage_names:
                raise ApiError(
                    400,
                    f"'sampling_params.{name}': not a later stage of model '{model_id}' (its "
                    f"later stages: {', '.join(sorted(stage_names - {first_stage.name}))}; "
                    "the first stage's fields are the request's own)",
                    param="sampling_params",
                )
            given[name] = fields
        params = given or None  # each merged over its stage's defaults by the engine
        if extra:
            return engine.request_params(params, extra=extra)
        engine.stage_params(params)  # RequestError (a 400) before anything starts
        return params

    def with_vllm_extras(
        body: Any, overrides: dict[str, Any], implied: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The request's vLLM sampling extras in the first stage's ``extra["vllm"]`` (over its
        pipeline defaults there, and over ``implied``: what its tools imply); a first stage of
        another kind cannot honour them: a 400."""
        extras = {**(implied or {}), **body.vllm_extras()}
        if not extras:
            return overrides
        kind = first_stage.config.kind
        if kind != "vllm":
            name = body.vllm_extra_names()[0]
            raise ApiError(
                400,
                f"'{name}' is a vLLM sampling field; the first stage '{first_stage.name}' of "
                f"model '{model_id}' is of kind '{kind}', which does not take it",
                param=name,
            )
        extra = dict(first_stage.config.sampling_params.get("extra") or {})
        vllm = {**extra.get("vllm", {}), **overrides.get("extra", {}).get("vllm", {}), **extras}
        return {**overrides, "extra": {**extra, "vllm": vllm}}

    def check_as_vllm(body: Any) -> None:
        """vLLM 0.32's own request checks that omni's stages would not make: an output budget
        beyond the context (``max_tokens`` up to it still clamps to what the prompt leaves, as
        in vLLM), and ``n`` > 1 with greedy sampling on a vllm first stage."""
        wanted, limit = body.max_output_tokens(), getattr(renderer, "max_model_len", None)
        if wanted is not None and limit is not None and wanted > limit:
            param = (
                "max_completion_tokens"
                if getattr(body, "max_completion_tokens", None)
                else ("max_tokens")
            )
            raise ApiError(
                400,
                f"{param}={wanted} cannot be greater than max_model_len={limit}. Please request "
                "fewer output tokens.",
                param=param,
            )
        if body.n > 1 and first_stage.config.kind == "vllm":
            temperature = body.temperature
            if temperature is None:
                temperature = first_stage.config.sampling_params.get("temperature", 1.0)
            if temperature < 1e-5:  # vLLM's _SAMPLING_EPS
                raise ApiError(
                    400, f"n must be 1 when using greedy sampling, got {body.n}.", param="n"
                )

    def check_modalities(modalities: list[str]) -> None:
        """Every modality asked for is some final stage's output type, else a 400 saying why."""
        missing = [m for m in modalities if m not in offered]
        if missing:
            finals = ", ".join(
                f"'{s.name}' ({s.config.final_output_type})"
                for s in stages.values()
                if s.config.final_output
            )
            raise ApiError(
                400,
                f"modalities {modalities!r}: model '{model_id}' cannot produce "
                f"{' or '.join(missing)}: no final stage of the pipeline outputs it (final "
                f"stages: {finals})",
                param="modalities",
            )

    async def body_of(request: Request, model: type[Any]) -> Any:
        raw = await request.body()  # read first: the guard's size and time limits apply
        check_json_media_type(request)
        return await off_loop(lambda: parse_body(model, decode_json(raw, settings.max_json_depth)))

    started = int(time.time())
    card = {
        "id": model_id,
        "object": "model",
        "created": started,
        "owned_by": "omni-core",
        "root": str(first_stage.config.engine_args.get("model") or model_id),
        "parent": None,
        "max_model_len": max_model_len(first_stage),
    }

    @app.get("/v1/models")
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

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        status = engine.health()
        ok = status["alive"] and all(s["live"] for s in status["stages"].values())
        if not request.scope["state"].get("authorized"):  # no detail for anonymous callers
            status = {"status": "ok" if ok else "unavailable"}
        return JSONResponse(status, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(metrics.render(engine), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await body_of(request, ChatCompletionRequest)
        check_model(body.model or model_id)
        assert renderer is not None
        modalities = list(dict.fromkeys(body.modalities or ["text"]))
        check_modalities(modalities)
        check_prompt_chars(prompt_chars(body.messages), settings.max_prompt_chars, "messages")
        check_as_vllm(body)
        tools, implied = None, {}
        if body.tools:
            tokenizer = getattr(renderer, "tokenizer", None)
            tools = ToolCalling.of(
                body.tools, body.tool_choice, tool_parser, tokenizer, parser_where
            )
            if tools is not None:
                implied = await off_loop(tools.vllm_adjustments)
        rendered = await off_loop(renderer.render_chat, body.messages, body.chat_options())
        overrides = with_vllm_extras(body, body.overrides(), implied)
        params = stage_params(overrides, body.request_extra(), body.stage_fields())
        top = body.num_logprobs()
        reply = AudioReply.of(modalities, body.audio.format if body.audio else "wav")
        # audio alone still runs the text stage: its text is the audio's transcript
        wanted = [*modalities, "text"] if reply.audio and "text" in offered else modalities
        run = Run(request, engine, admission, rendered, params, list(dict.fromkeys(wanted)), drain)
        rid = request_id_of(request, body)
        extras = extras_of(body)
        if body.stream:
            first = await run.start()
            chunks = streams.chat_chunks(
                run.outputs(first),
                model=model_id,
                n=body.n,
                top_logprobs=top,
                decode=renderer.decode,
                usage_prompt=(rendered.num_tokens or 0) if body.include_usage else None,
                on_done=metrics.count_usage,
                reply=reply,
                request_id=rid,
                continuous_usage=body.continuous_usage,
                extras=extras,
                tools=tools,
            )
            return with_request_id(run.stream(chunks), request)
        outputs = await run.collect()
        choices = gather(outputs, body.n, prompt=extras.token_ids or extras.prompt_logprobs)
        response = await off_loop(
            lambda: chat_response(
                choices,
                model=model_id,
                prompt_tokens=rendered.num_tokens or 0,
                reply=reply,
                top_logprobs=top,
                decode=renderer.decode,
                extras=extras,
                request_id=rid,
                tools=tools,
            )
        )
        metrics.count_usage(response["usage"])
        return with_request_id(JSONResponse(response), request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await body_of(request, CompletionRequest)
        check_model(body.model or model_id)
        assert renderer is not None
        if "text" not in offered:
            raise ApiError(400, f"model '{model_id}' does not produce text", param="model")
        check_as_vllm(body)
        prompts = body.prompts()
        admission.check_fits(len(prompts), "prompt")
        chars = sum(len(p) for p in prompts if isinstance(p, str))
        check_prompt_chars(chars, settings.max_prompt_chars, "prompt")

        def render() -> list[RenderedPrompt]:
            return [
                renderer.encode(p, body.add_special_tokens)
                if isinstance(p, str)
                else renderer.tokens(p)
                for p in prompts
            ]

        rendered = await off_loop(render)
        overrides = body.overrides()
        echoes: list[tuple[str, list[int]]] | None = None
        if body.echo:
            echoes = [
                (r.text, list(r.prompt) if isinstance(r.prompt, list) else []) for r in rendered
            ]
            if body.logprobs is not None:  # the prompt's logprobs, from the stage (vLLM's)
                extra = dict(first_stage.config.sampling_params.get("extra") or {})
                vllm = {**extra.get("vllm", {}), "prompt_logprobs": body.logprobs}
                overrides["extra"] = {**extra, "vllm": vllm}
        params = stage_params(with_vllm_extras(body, overrides))
        runs = start_runs(request, engine, admission, rendered, params, drain)
        rid = request_id_of(request, body)
        extras = extras_of(body)
        prompt_tokens = sum(r.num_tokens or 0 for r in rendered)
        n = body.n
        if body.stream:
            firsts = await all_of(runs, Run.start)
            runs[0].siblings = runs[1:]  # its stream's end closes them all
            if echoes is not None:  # a stage without prompt logprobs: a 400, not a broken stream
                try:
                    for first, echo in zip(firsts, echoes, strict=True):
                        streams.prompt_logprobs([first], len(echo[1]), body.logprobs, stage_name)
                except ApiError:
                    await runs[0].close()
                    raise
            chunks = streams.completion_chunks(
                streams.interleave([r.outputs(f) for r, f in zip(runs, firsts, strict=True)], n),
                model=model_id,
                n=n * len(runs),
                logprobs=body.logprobs,
                decode=renderer.decode,
                echo=[e for e in echoes for _ in range(n)] if echoes is not None else None,
                usage_prompt=prompt_tokens if body.include_usage else None,
                stage_name=stage_name,
                on_done=metrics.count_usage,
                request_id=rid,
                continuous_usage=body.continuous_usage,
                extras=extras,
            )
            return with_request_id(runs[0].stream(chunks), request)
        every = await all_of(runs, Run.collect)
        choices = []
        echoed: list[tuple[str, list[int], list[Any]] | None] = []
        for i, outputs in enumerate(every):
            choices += gather(outputs, n, prompt=extras.token_ids or extras.prompt_logprobs)
            if echoes is not None:
                ids = echoes[i][1]
                steps = streams.prompt_logprobs(outputs, len(ids), body.logprobs, stage_name)
                echoed += [(echoes[i][0], ids, steps)] * n
        response = completion_response(
            choices,
            model=model_id,
            prompt_tokens=prompt_tokens,
            echo=echoed or None,
            logprobs=body.logprobs,
            decode=renderer.decode,
            extras=extras,
            request_id=rid,
        )
        metrics.count_usage(response["usage"])
        return with_request_id(JSONResponse(response), request)

    @app.post("/v1/images/generations")
    async def images(request: Request) -> Any:
        body = await body_of(request, ImageRequest)
        check_model(body.model or model_id)
        if "image" not in offered:
            raise ApiError(400, f"model '{model_id}' does not generate images", param="model")
        params = stage_params(body.overrides(), body.stage_extra())
        seed = body.seed
        if seed is None and body.n > 1:  # n different images: children sample with seed + i
            seed = secrets.randbits(62)
        if seed is not None:  # every stage's seed, so that child i of n gets seed + i
            params = {
                name: msgspec.structs.replace(p, seed=seed)
                for name, p in engine.request_params(params).items()
            }
        rendered = RenderedPrompt(body.prompt, body.prompt, None)
        run = Run(request, engine, admission, rendered, params, ["image"], drain)
        outputs = await run.collect()
        images = [o.payload for o in outputs if isinstance(o.payload, Image) and o.finish_reason]
        data = await off_loop(
            lambda: [{"b64_json": base64.b64encode(png_bytes(im)).decode()} for im in images]
        )
        return {"created": int(time.time()), "data": data}

    app.include_router(version_router())
    tokens = tokenizer_router(
        renderer, lambda model: check_model(model or model_id), settings.max_json_depth
    )
    if tokens is not None:
        app.include_router(tokens)

    from omni_core.plugin.hooks import PluginHost

    host: PluginHost = engine.plugins
    core_routes = len(app.routes)
    for route in host.server_routes():
        route.mount(app, engine)
    plugin_paths.extend(sorted({getattr(r, "path", "") for r in app.routes[core_routes:]} - {""}))
    return app
