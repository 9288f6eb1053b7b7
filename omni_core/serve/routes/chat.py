"""``POST /v1/chat/completions``: a chat rendered with the first stage's template, text and
audio out (whole or streamed), tool calling, later stages' sampling fields.

Validated before the request reaches the engine, streamed ones before the 200: their first
output is awaited too, so a stage's own rejection still answers with a 4xx.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from omni_core.serve import streams
from omni_core.serve.context import (
    ServeContext,
    check_prompt_chars,
    extras_of,
    off_loop,
    prompt_chars,
    request_id_of,
    with_request_id,
)
from omni_core.serve.protocol import ChatCompletionRequest
from omni_core.serve.responses import AudioReply, chat_response, gather
from omni_core.serve.runs import Run
from omni_core.serve.tools import ToolCalling


def chat_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    engine, metrics, model_id = ctx.engine, ctx.metrics, ctx.model_id

    @router.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await ctx.body_of(request, ChatCompletionRequest)
        ctx.check_model(body.model or model_id)
        renderer = ctx.renderer
        assert renderer is not None
        modalities = list(dict.fromkeys(body.modalities or ["text"]))
        ctx.check_modalities(modalities)
        check_prompt_chars(prompt_chars(body.messages), ctx.settings.max_prompt_chars, "messages")
        ctx.check_as_vllm(body)
        tools, implied = None, {}
        if body.tools:
            tokenizer = getattr(renderer, "tokenizer", None)
            tools = ToolCalling.of(
                body.tools, body.tool_choice, ctx.tool_parser, tokenizer, ctx.parser_where
            )
            if tools is not None:
                implied = await off_loop(tools.vllm_adjustments)
        rendered = await off_loop(renderer.render_chat, body.messages, body.chat_options())
        overrides = ctx.with_vllm_extras(body, body.overrides(), implied)
        params = ctx.stage_params(overrides, body.request_extra(), body.stage_fields())
        top = body.num_logprobs()
        reply = AudioReply.of(modalities, body.audio.format if body.audio else "wav")
        # audio alone still runs the text stage: its text is the audio's transcript
        wanted = [*modalities, "text"] if reply.audio and "text" in ctx.offered else modalities
        run = Run(
            request, engine, ctx.admission, rendered, params, list(dict.fromkeys(wanted)), ctx.drain
        )
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

    return router
