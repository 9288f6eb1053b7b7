"""Server-sent events of streamed chat completions and completions (OpenAI's chunk shapes).

Deltas go out as the engine yields them; each choice's ``finish_reason`` comes in one closing
chunk per choice; with ``stream_options.include_usage`` a last chunk with no choices carries the
usage; then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from omni_core.media import AudioChunk, pcm16
from omni_core.outputs import OmniRequestOutput

if TYPE_CHECKING:
    from omni_core.serve.tools import ToolCalling
from omni_core.serve.errors import ApiError
from omni_core.serve.responses import (
    FINGERPRINT,
    AudioReply,
    Choice,
    Extras,
    chat_logprobs,
    completion_logprobs,
    new_id,
    usage,
)

Decode = Callable[[list[int]], str]


def prompt_logprobs(
    outputs: list[OmniRequestOutput], length: int, wanted: int | None, stage: str
) -> list[Any]:
    """The prompt's per-position logprobs for ``echo`` (vLLM reports them on a request's first
    output, the first position None); ``[None] * length`` when none were asked for."""
    if wanted is None:
        return [None] * length
    for out in outputs:
        steps = getattr(out.payload, "prompt_logprobs", None)
        if steps is not None:
            return list(steps)
    raise ApiError(
        400,
        f"stage '{stage}' does not report prompt logprobs ('echo' with 'logprobs' needs them)",
        param="echo",
    )


def event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def error_event(exc: ApiError) -> str:
    error = {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}
    return event({"error": error})


class _Chunks:
    """Shared chunk framing and the usage bookkeeping of one streamed request."""

    def __init__(
        self,
        prefix: str,
        obj: str,
        model: str,
        n: int,
        request_id: str | None = None,
        continuous: int | None = None,
        extras: Extras | None = None,
    ) -> None:
        self.head = {
            "id": f"{prefix}-{request_id}" if request_id else new_id(prefix),
            "object": obj,
            "created": int(time.time()),
            "model": model,
        }
        self.extras = extras or Extras()
        self.choices = [Choice(prompt=self.extras.token_ids) for _ in range(n)]
        self.continuous = continuous  # the prompt's tokens: usage in every choice chunk

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        if self.continuous is not None and choices and "usage" not in extra:
            done = sum(len(self.choices[c["index"]].token_ids) for c in choices)
            extra["usage"] = {
                "prompt_tokens": self.continuous,
                "total_tokens": self.continuous + done,
                "completion_tokens": done,
            }
        return event({**self.head, "choices": choices, **extra})

    def tail(
        self, usage_prompt: int | None, on_done: Callable[[dict[str, Any]], None] | None
    ) -> list[str]:
        spent = usage(usage_prompt or 0, self.choices)
        if on_done is not None:
            on_done(spent)
        out = []
        if usage_prompt is not None:
            brief = {
                k: v for k, v in spent.items() if v is not None and k != "prompt_tokens_details"
            }
            out.append(self.chunk([], usage=brief, system_fingerprint=FINGERPRINT))
        out.append("data: [DONE]\n\n")
        return out


async def chat_chunks(
    outputs: AsyncIterator[OmniRequestOutput],
    *,
    model: str,
    n: int,
    top_logprobs: int | None,
    decode: Decode,
    usage_prompt: int | None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    reply: AudioReply | None = None,
    request_id: str | None = None,
    continuous_usage: bool = False,
    extras: Extras | None = None,
    tools: ToolCalling | None = None,
) -> AsyncIterator[str]:
    """Chat chunks; with ``tools``, each text delta goes through the choice's tool-call stream
    (``content`` and/or ``tool_calls`` deltas, OpenAI's shapes).

    With audio asked for (``reply.audio``), each choice's ``delta.audio`` pieces
    carry one audio ``id`` and, as the stages produce them, base64 pcm16 ``data`` (the audio
    stage's chunks) and ``transcript`` (the text stage's deltas, also in ``content`` when text is
    asked for too); every piece has all three (``""`` where it adds nothing), so concatenating
    them never meets a null. A last piece per choice carries ``expires_at``, before the closing
    chunks."""
    reply = reply or AudioReply()
    continuous = usage_prompt if continuous_usage else None
    c = _Chunks("chatcmpl", "chat.completion.chunk", model, n, request_id, continuous, extras)
    audio_ids = [new_id("audio") for _ in range(n)] if reply.audio else []
    spoke = [False] * n  # an audio piece went out for the choice
    calls = [tools.streamer() for _ in range(n)] if tools is not None else []

    def audio(index: int, data: str = "", transcript: str = "", **more: Any) -> dict[str, Any]:
        return {"id": audio_ids[index], "data": data, "transcript": transcript, **more}

    prompt_ids = None
    if c.extras.token_ids:  # vLLM sends the prompt's ids in the first chunk: from the first output
        head = [out async for out in _first(outputs)]
        outputs = _chain(head, outputs)
        if head and head[0].payload is not None:
            ids = getattr(head[0].payload, "prompt_token_ids", None)
            prompt_ids = list(ids) if ids is not None else None
    for index in range(n):
        role = {"index": index, "delta": {"role": "assistant", "content": ""}}
        yield c.chunk(
            [{**role, "logprobs": None, "finish_reason": None}],
            prompt_token_ids=prompt_ids if index == 0 else None,
            prompt_text=None,
        )
    async for out in outputs:
        if not 0 <= out.index < n:
            continue
        choice = c.choices[out.index]
        choice.add(out)
        delta: dict[str, Any] = {}
        logprobs = None
        if out.output_type == "text" and (out.text or out.token_ids):
            if reply.text:
                if calls:
                    delta.update(await calls[out.index].delta(out.text, list(out.token_ids)))
                else:
                    delta["content"] = out.text
                if top_logprobs is not None:
                    steps = list(out.logprobs or ())
                    logprobs = {
                        "content": chat_logprobs(out.token_ids, steps, top_logprobs, decode)
                    }
            if reply.audio:
                delta["audio"] = audio(out.index, transcript=out.text)
        elif isinstance(out.payload, AudioChunk) and reply.audio:
            data = base64.b64encode(pcm16(out.payload.samples)).decode()
            delta["audio"] = audio(out.index, data=data)
        if delta:
            spoke[out.index] = spoke[out.index] or "audio" in delta
            body = {"index": out.index, "delta": delta, "logprobs": logprobs}
            ids = list(out.token_ids) if c.extras.token_ids else None
            yield c.chunk([{**body, "finish_reason": None, "token_ids": ids}])
    for index in range(n):
        if spoke[index]:
            last = {"audio": audio(index, expires_at=reply.expires_at())}
            body = {"index": index, "delta": last, "logprobs": None}
            yield c.chunk([{**body, "finish_reason": None, "token_ids": None}])
    for index, stream in enumerate(calls):
        last = await stream.finish()
        if last:
            body = {"index": index, "delta": last, "logprobs": None}
            yield c.chunk([{**body, "finish_reason": None, "token_ids": None}])
    closing_extra = {} if usage_prompt is not None else {"system_fingerprint": FINGERPRINT}
    for index, choice in enumerate(c.choices):
        closing = {"index": index, "delta": {}, "logprobs": None}
        reason = choice.finish_reason or "stop"
        if tools is not None:
            reason = tools.finish_reason(choice.finish_reason, calls[index].called)
        stop = choice.stop_reason
        yield c.chunk(
            [{**closing, "finish_reason": reason, "stop_reason": stop, "token_ids": None}],
            **closing_extra,
        )
    for tail in c.tail(usage_prompt, on_done):
        yield tail


async def completion_chunks(
    outputs: AsyncIterator[OmniRequestOutput],
    *,
    model: str,
    n: int,
    logprobs: int | None,
    decode: Decode,
    echo: tuple[str, list[int]] | list[tuple[str, list[int]]] | None,
    usage_prompt: int | None,
    stage_name: str = "",
    on_done: Callable[[dict[str, Any]], None] | None = None,
    request_id: str | None = None,
    continuous_usage: bool = False,
    extras: Extras | None = None,
) -> AsyncIterator[str]:
    continuous = usage_prompt if continuous_usage else None
    c = _Chunks("cmpl", "text_completion", model, n, request_id, continuous, extras)
    offsets = [0] * n
    echoes = echo if isinstance(echo, list) else [echo] * n  # per choice (several prompts)
    pending_echo = [e is not None for e in echoes]
    sent_prompt = [False] * n

    def choice(
        index: int,
        text: str,
        lp: Any,
        finish: str | None,
        ids: list[int] | None = None,
        stop: int | str | None = None,
    ) -> dict[str, Any]:
        return {
            "index": index,
            "text": text,
            "logprobs": lp,
            "finish_reason": finish,
            "stop_reason": stop,
            "prompt_token_ids": None,
            "token_ids": ids if c.extras.token_ids else None,
        }

    async for out in outputs:
        if not 0 <= out.index < n or out.output_type != "text":
            continue
        c.choices[out.index].add(out)
        if not (out.text or out.token_ids):
            continue
        text, ids, steps = out.text, out.token_ids, list(out.logprobs or ())
        mine = echoes[out.index]
        if pending_echo[out.index] and mine is not None:
            text = mine[0] + text
            prompt_steps = prompt_logprobs([out], len(mine[1]), logprobs, stage_name)
            ids, steps = mine[1] + ids, prompt_steps + steps
            pending_echo[out.index] = False
        lp = None
        if logprobs is not None:
            lp = completion_logprobs(ids, steps, logprobs, decode, offsets[out.index])
            offsets[out.index] += sum(len(t) for t in lp["tokens"])
        body = choice(out.index, text, lp, None, list(out.token_ids))
        if c.extras.token_ids and not sent_prompt[out.index]:
            sent_prompt[out.index] = True
            body["prompt_token_ids"] = c.choices[out.index].prompt_token_ids
        yield c.chunk([body])
    closing_extra = {} if usage_prompt is not None else {"system_fingerprint": FINGERPRINT}
    for index, done in enumerate(c.choices):
        mine = echoes[index]
        text = mine[0] if pending_echo[index] and mine is not None else ""
        closing = choice(index, text, None, done.finish_reason or "stop", [], done.stop_reason)
        yield c.chunk([closing], **closing_extra)
    for tail in c.tail(usage_prompt, on_done):
        yield tail


async def interleave(
    streams: list[AsyncIterator[OmniRequestOutput]], n: int
) -> AsyncIterator[OmniRequestOutput]:
    """Several prompts' outputs as they come, prompt ``i``'s choice ``j`` as choice
    ``i * n + j`` (vLLM's order); a failure of one ends the whole stream with it."""
    if len(streams) == 1:
        async for out in streams[0]:
            yield out
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done = object()

    async def pump(i: int, stream: AsyncIterator[OmniRequestOutput]) -> None:
        try:
            async for out in stream:
                await queue.put((i, out))
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put((i, exc))
            return
        await queue.put((i, done))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, item = await queue.get()
            if item is done:
                left -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield msgspec.structs.replace(item, index=i * n + item.index)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _first(outputs: AsyncIterator[OmniRequestOutput]) -> AsyncIterator[OmniRequestOutput]:
    async for out in outputs:
        yield out
        return


async def _chain(
    head: list[OmniRequestOutput], rest: AsyncIterator[OmniRequestOutput]
) -> AsyncIterator[OmniRequestOutput]:
    for out in head:
        yield out
    async for out in rest:
        yield out
