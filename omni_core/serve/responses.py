"""OpenAI response bodies built from a request's outputs: chat, completions, logprobs, usage.

Responses carry the same fields as vLLM 0.32's OpenAI server (its vLLM-specific fields that
omni-core does not fill are null), so a client written against vLLM reads them unchanged.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.media import AudioChunk, audio_bytes
from omni_core.outputs import OmniRequestOutput

if TYPE_CHECKING:
    from omni_core.serve.tools import ToolCalling

FINGERPRINT = "omni-core"
NEVER_FILLED = {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def _floor(logprob: float) -> float:
    return max(float(logprob), -9999.0)  # -inf is not JSON; OpenAI's floor


def _token_text(entry: Any, token_id: int, decode: Callable[[list[int]], str]) -> str:
    text = getattr(entry, "decoded_token", None)
    return text if text is not None else decode([token_id])


def chat_logprobs(
    token_ids: list[int], steps: list[Any], top: int, decode: Callable[[list[int]], str]
) -> list[dict[str, Any]]:
    """OpenAI chat ``logprobs.content`` entries: one per token, with the first ``top`` of each
    step's candidates (vLLM's order: the sampled token first)."""
    content = []
    for token_id, step in zip(token_ids, steps, strict=False):
        own = step.get(token_id) if step else None
        token = _token_text(own, token_id, decode)
        entry: dict[str, Any] = {"token": token, "logprob": -9999.0, "bytes": _bytes(token)}
        if own is not None:
            entry["logprob"] = _floor(own.logprob)
        candidates = []
        for i, (cid, cand) in enumerate((step or {}).items()):
            if i >= top:
                break
            text = _token_text(cand, cid, decode)
            candidates.append(
                {"token": text, "logprob": _floor(cand.logprob), "bytes": _bytes(text)}
            )
        entry["top_logprobs"] = candidates
        content.append(entry)
    return content


def completion_logprobs(
    token_ids: list[int],
    steps: list[Any],
    top: int,
    decode: Callable[[list[int]], str],
    offset: int = 0,
) -> dict[str, Any]:
    """OpenAI completion ``logprobs``: tokens, their logprobs, up to ``top`` + 1 candidates per
    step and each token's offset in the text (a step without logprobs is null, as for echo's
    first prompt token)."""
    tokens: list[str] = []
    values: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for token_id, step in zip(token_ids, steps, strict=False):
        own = step.get(token_id) if step else None
        token = _token_text(own, token_id, decode)
        offsets.append(offset)
        offset += len(token)
        tokens.append(token)
        if own is None:
            values.append(None)
            tops.append(None)
            continue
        values.append(_floor(own.logprob))
        tops.append(
            {
                _token_text(c, cid, decode): _floor(c.logprob)
                for i, (cid, c) in enumerate(step.items())
                if i <= top
            }
        )
    return {
        "text_offset": offsets,
        "token_logprobs": values,
        "tokens": tokens,
        "top_logprobs": tops,
    }


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


@dataclass
class Choice:
    """What one choice (``index``) of a request produced, gathered from its outputs."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    audio: list[AudioChunk] = field(default_factory=list)
    audio_tokens: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[Any] | None = None
    prompt: bool = False  # read the prompt's ids and logprobs from vLLM's payload (asked for)
    seen_prompt: bool = False

    def add(self, out: OmniRequestOutput) -> None:
        if out.output_type == "text":
            self.text += out.text
            self.token_ids.extend(out.token_ids)
            if out.logprobs:
                self.logprobs.extend(out.logprobs)
            if out.finish_reason:
                self.finish_reason = out.finish_reason
                self.stop_reason = stop_reason(out)
            if self.prompt and not self.seen_prompt and out.payload is not None:
                self.seen_prompt = True  # vLLM's first output carries the prompt's fields
                ids = getattr(out.payload, "prompt_token_ids", None)
                self.prompt_token_ids = list(ids) if ids is not None else None
                steps = getattr(out.payload, "prompt_logprobs", None)
                self.prompt_logprobs = list(steps) if steps is not None else None
        elif out.output_type == "audio":
            if isinstance(out.payload, AudioChunk):
                self.audio.append(out.payload)
            self.audio_tokens += len(out.token_ids)
            if out.finish_reason and self.finish_reason is None:
                self.finish_reason = out.finish_reason


def stop_reason(out: OmniRequestOutput) -> int | str | None:
    """vLLM's ``stop_reason`` of a finished text output: the stop string or stop token id that
    ended it (None for EOS or the length limit); None when the stage sent no vLLM payload."""
    outputs = getattr(out.payload, "outputs", None)
    if not outputs:
        return None
    reason = getattr(outputs[0], "stop_reason", None)
    return reason if isinstance(reason, int | str) else None


def prompt_logprobs_json(
    steps: list[Any] | None, decode: Callable[[list[int]], str]
) -> list[dict[str, Any] | None] | None:
    """vLLM's ``prompt_logprobs``: per prompt position (the first None) its candidates by token id,
    each ``{"logprob", "rank", "decoded_token"}`` as vLLM's server writes them."""
    if steps is None:
        return None
    out: list[dict[str, Any] | None] = []
    for step in steps:
        if step is None:
            out.append(None)
            continue
        out.append(
            {
                str(tid): {
                    "logprob": _floor(entry.logprob),
                    "rank": getattr(entry, "rank", None),
                    "decoded_token": _token_text(entry, tid, decode),
                }
                for tid, entry in step.items()
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class Extras:
    """vLLM's response extras a request asked for: ``return_token_ids`` (the choices' and the
    prompt's token ids) and ``prompt_logprobs``."""

    token_ids: bool = False
    prompt_logprobs: bool = False


@dataclass(frozen=True, slots=True)
class AudioReply:
    """What a chat answer carries: ``text`` (``message.content``) and/or ``audio``
    (``message.audio``, its data in ``format``: a whole file, or pcm16 pieces when streamed)."""

    text: bool = True
    audio: bool = False
    format: str = "wav"
    expires_s: int = 3600  # ``expires_at``: nothing is stored, it only tells clients a horizon

    @classmethod
    def of(cls, modalities: list[str], fmt: str = "wav") -> AudioReply:
        return cls(text="text" in modalities, audio="audio" in modalities, format=fmt)

    def message_audio(self, choice: Choice) -> dict[str, Any] | None:
        """OpenAI's ``message.audio`` of a whole response (None when no audio was produced)."""
        if not self.audio or not choice.audio:
            return None
        return {
            "id": new_id("audio"),
            "data": base64.b64encode(audio_bytes(choice.audio, self.format)).decode(),
            "expires_at": self.expires_at(),
            "transcript": choice.text,
        }

    def expires_at(self) -> int:
        return int(time.time()) + self.expires_s


def gather(outputs: Iterable[OmniRequestOutput], n: int, prompt: bool = False) -> list[Choice]:
    choices = [Choice(prompt=prompt) for _ in range(n)]
    for out in outputs:
        if 0 <= out.index < n:
            choices[out.index].add(out)
    return choices


def usage(prompt_tokens: int, choices: Iterable[Choice]) -> dict[str, Any]:
    choices = list(choices)
    text = sum(len(c.token_ids) for c in choices)
    audio = sum(c.audio_tokens for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + text + audio,
        "completion_tokens": text + audio,
        "prompt_tokens_details": None,
        "completion_tokens_details": {"audio_tokens": audio} if audio else None,
    }


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def chat_response(
    choices: list[Choice],
    *,
    model: str,
    prompt_tokens: int,
    reply: AudioReply,
    top_logprobs: int | None,
    decode: Callable[[list[int]], str],
    extras: Extras = Extras(),
    request_id: str | None = None,
    tools: ToolCalling | None = None,
) -> dict[str, Any]:
    """A whole chat response; with ``tools``, each answer's tool calls parsed out of its text
    (blocking: run it off the event loop)."""
    body_choices = []
    for index, choice in enumerate(choices):
        content: str | None = choice.text
        calls: list[dict[str, Any]] = []
        finish = choice.finish_reason or "stop"
        if tools is not None:
            content, calls = tools.whole(choice.text)
            finish = tools.finish_reason(choice.finish_reason, bool(calls))
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content if reply.text else None,
            "refusal": None,
            "annotations": None,
            "audio": reply.message_audio(choice),
            "function_call": None,
            "tool_calls": calls,
            "reasoning": None,
        }
        logprobs = None
        if top_logprobs is not None:
            steps = choice.logprobs
            logprobs = {"content": chat_logprobs(choice.token_ids, steps, top_logprobs, decode)}
        body_choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": choice.stop_reason,
                "token_ids": choice.token_ids if extras.token_ids else None,
                "routed_experts": None,
            }
        )
    first = choices[0] if choices else Choice()
    extra = {
        "prompt_logprobs": prompt_logprobs_json(first.prompt_logprobs, decode)
        if extras.prompt_logprobs
        else None,
        "prompt_token_ids": first.prompt_token_ids if extras.token_ids else None,
        "prompt_text": None,
    }
    return _whole(
        "chatcmpl",
        "chat.completion",
        model,
        body_choices,
        usage(prompt_tokens, choices),
        extra,
        request_id,
    )


def completion_response(
    choices: list[Choice],
    *,
    model: str,
    prompt_tokens: int,
    echo: tuple[str, list[int], list[Any]] | list[tuple[str, list[int], list[Any]] | None] | None,
    logprobs: int | None,
    decode: Callable[[list[int]], str],
    extras: Extras = Extras(),
    request_id: str | None = None,
) -> dict[str, Any]:
    """A whole completion; ``echo``: the prompt's text, ids and logprobs, for every choice or
    per choice (several prompts)."""
    echoes = echo if isinstance(echo, list) else [echo] * len(choices)
    body_choices = []
    for index, choice in enumerate(choices):
        text, ids, steps = choice.text, choice.token_ids, list(choice.logprobs)
        mine = echoes[index]
        if mine is not None:
            text = mine[0] + text
            ids = mine[1] + ids
            steps = mine[2] + steps
        body_choices.append(
            {
                "index": index,
                "text": text,
                "logprobs": None
                if logprobs is None
                else completion_logprobs(ids, steps, logprobs, decode),
                "finish_reason": choice.finish_reason or "stop",
                "stop_reason": choice.stop_reason,
                "token_ids": choice.token_ids if extras.token_ids else None,
                "prompt_logprobs": prompt_logprobs_json(choice.prompt_logprobs, decode)
                if extras.prompt_logprobs
                else None,
                "prompt_token_ids": choice.prompt_token_ids if extras.token_ids else None,
                "routed_experts": None,
            }
        )
    spent = usage(prompt_tokens, choices)
    return _whole("cmpl", "text_completion", model, body_choices, spent, {}, request_id)


def _whole(
    prefix: str,
    obj: str,
    model: str,
    choices: list[dict[str, Any]],
    spent: dict[str, Any],
    extra: dict[str, Any],
    request_id: str | None = None,
) -> dict[str, Any]:
    """A whole (non-streamed) response around its choices, in vLLM's field order; its id is
    ``{prefix}-{request_id}`` when the caller named the request (vLLM's X-Request-Id)."""
    return {
        "id": f"{prefix}-{request_id}" if request_id else new_id(prefix),
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": spent,
        **extra,
        **NEVER_FILLED,
    }
