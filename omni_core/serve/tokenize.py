"""vLLM's utility routes: ``GET /version``, and ``POST /tokenize`` / ``POST /detokenize`` with the
first stage's tokenizer (mounted only where that stage has one: a ``vllm`` stage's renderer).

Shapes as vLLM 0.32's server (``vllm/entrypoints/serve/tokenize``): ``/tokenize`` takes a
``prompt`` or chat ``messages`` and answers ``{count, max_model_len, tokens, token_strs}``;
``/detokenize`` takes ``tokens`` and answers ``{prompt}``. Behind the API key like every route
but ``/health``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field, model_validator

import omni_core
from omni_core.chat import ChatMessage, ChatOptions
from omni_core.serve.bodies import check_json_media_type, decode_json, parse_body
from omni_core.serve.errors import ApiError
from omni_core.serve.protocol.base import _Body
from omni_core.serve.tools import ToolDef


class TokenizePrompt(_Body):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChat(_Body):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False  # the template adds them (vLLM's default here)
    return_token_strs: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[ToolDef] | None = None

    @model_validator(mode="after")
    def _one_prompt_end(self) -> TokenizeChat:
        if self.continue_final_message and self.add_generation_prompt:
            raise ApiError(
                400,
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                param="continue_final_message",
            )
        return self


class Detokenize(_Body):
    model: str | None = None
    tokens: list[int] = Field(min_length=1)


def version_router() -> APIRouter:
    router = APIRouter()

    @router.get("/version")
    async def version() -> dict[str, str]:
        return {"version": omni_core.__version__}

    return router


def tokenizer_router(
    renderer: Any, check_model: Callable[[str | None], None], max_json_depth: int
) -> APIRouter | None:
    """``/tokenize`` and ``/detokenize`` over ``renderer``'s tokenizer (its chat template for
    ``messages``); None without one. Parsing and tokenizing run in worker threads."""
    tokenizer = getattr(renderer, "tokenizer", None)
    if tokenizer is None:
        return None
    router = APIRouter()

    async def body_of(request: Request, choose: Callable[[dict[str, Any]], type[Any]]) -> Any:
        raw = await request.body()
        check_json_media_type(request)

        def parse() -> Any:
            data = decode_json(raw, max_json_depth)
            return parse_body(choose(data), data)

        return await asyncio.to_thread(parse)

    def token_strs(ids: list[int]) -> list[str]:
        return [str(t) for t in tokenizer.convert_ids_to_tokens(ids)]

    def tokenize_chat(body: TokenizeChat) -> list[int]:
        options = ChatOptions(
            add_generation_prompt=body.add_generation_prompt,
            continue_final_message=body.continue_final_message,
            chat_template_kwargs=body.chat_template_kwargs,
            tools=[t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None,
        )
        rendered = renderer.render_chat(body.messages, options)
        if body.add_special_tokens:
            return list(tokenizer.encode(rendered.text, add_special_tokens=True))
        prompt = rendered.prompt
        return list(prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt)

    @router.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await body_of(
            request, lambda data: TokenizeChat if "messages" in data else TokenizePrompt
        )
        check_model(body.model)
        if isinstance(body, TokenizeChat):
            ids = await asyncio.to_thread(tokenize_chat, body)
        else:
            special = body.add_special_tokens
            ids = await asyncio.to_thread(
                lambda: list(tokenizer.encode(body.prompt, add_special_tokens=special))
            )
        return {
            "count": len(ids),
            "max_model_len": renderer.max_model_len,
            "tokens": ids,
            "token_strs": token_strs(ids) if body.return_token_strs else None,
        }

    @router.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, str]:
        body = await body_of(request, lambda data: Detokenize)
        check_model(body.model)
        vocab = len(tokenizer)
        bad = [t for t in body.tokens if not 0 <= t < vocab]
        if bad:
            raise ApiError(
                400,
                f"'tokens': token id {bad[0]} is outside the vocabulary of stage "
                f"'{renderer.stage_name}' (0..{vocab - 1})",
                param="tokens",
            )
        return {"prompt": await asyncio.to_thread(renderer.decode, body.tokens)}

    return router
