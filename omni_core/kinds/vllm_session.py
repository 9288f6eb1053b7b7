"""Resumable vLLM requests ("sessions"): one live request whose context grows chunk by chunk.

vLLM 0.32 can keep a request alive between generations (``resumable``): each appended chunk is
prefilled alone (the KV of everything before is kept) and then generates a *segment* of at least
one token. The engine keeps every segment's tokens in the context **except the last sampled one**
(never fed through the model); a session re-feeds it at the head of the next chunk, so the
context is exactly the interleaved sequence ``chunk 1, segment 1, chunk 2, segment 2, ...`` and
each segment's greedy output equals a fresh request over that sequence.

vLLM checks each chunk alone against ``max_model_len``; a session growing past it kills the whole
engine. :meth:`ResumableSession.append` therefore caps the running length itself: a chunk that
would not fit (with its segment's ``max_tokens``) fails with :class:`PromptTooLongError` (400)
before vLLM sees it, and the session stays usable (or is closed by its owner).

vLLM refuses resumable requests with ``prompt_embeds``, ``n > 1``, stop strings or a final-only
output kind: :func:`refusal` says why a request cannot be one (the ``vllm`` kind then keeps
re-prefilling each chunk as a fresh request).

Stop-now (barge-in): an engine built with ``logits_processors=[stop_now_processor()]`` forces a
session's segment to end on its next step after :meth:`ResumableSession.stop_now`: every logit
but the stop token's is set to -inf, the stop token ends the segment (it is the segment's last
token, so it never enters the context) and the KV is kept for the next chunk.

This module runs inside a ``vllm`` stage process (the engine is vLLM's synchronous ``LLMEngine``,
built by :func:`build_engine`); a plugin's own worker engine (:mod:`omni_core.stage.worker`) can
drive sessions with it. Not thread-safe: one thread drives the engine.
"""

from __future__ import annotations

import logging
from typing import Any

from omni_core.errors import ConfigError, RequestError

logger = logging.getLogger(__name__)

__all__ = [
    "PromptTooLongError",
    "ResumableSession",
    "build_engine",
    "hidden_state_capture",
    "refusal",
    "stop_now_processor",
]


class PromptTooLongError(RequestError):
    """A prompt (after tokenization), or a session's running context, longer than the stage's
    ``max_model_len`` allows (400)."""


def build_engine(model: str, **engine_args: Any) -> Any:
    """vLLM's synchronous engine with its core in this process (what a ``vllm`` stage runs);
    pass ``logits_processors=[stop_now_processor()]`` for :meth:`ResumableSession.stop_now`."""
    from omni_core.kinds import vllm_adapter as va

    return va.build_engine(model, **engine_args)


def about_prompt_length(exc: BaseException) -> bool:
    """Whether vLLM's validation error is about the prompt's length. vLLM 0.32 says it three
    ways: tokens over the limit (``input_tokens``), text longer than the limit's characters
    (``input_text``), no room left for one output token."""
    if getattr(exc, "parameter", None) in ("input_tokens", "input_text"):
        return True
    return "maximum model length" in str(exc) or "maximum context length" in str(exc)


def hidden_state_capture(engine: Any, layers: list[str | int]) -> Any:
    """Per-token hidden states of ``engine``'s requests (``layers``: ``embeddings`` (or 0),
    ``final`` (or -1), ``layer:K``; :mod:`omni_core.kinds.vllm_hidden`): hooks on the model,
    nothing captured until a request is watched. Pass it to :class:`ResumableSession`
    (``capture``); the engine must run with prefix caching off (every position computed) and
    eager. Arrays come back in process. An unknown layer is a :class:`ConfigError` here, not a
    failure inside the model's forward (which would end the stage)."""
    from pydantic import ValidationError

    from omni_core.kinds import vllm_adapter as va
    from omni_core.kinds.vllm_hidden import HiddenStateCapture
    from omni_core.kinds.vllm_kind import HiddenStatesArgs

    try:
        names = HiddenStatesArgs(layers=list(layers)).layers
    except ValidationError as exc:
        problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError([f"hidden_state_capture layers: {problem}"]) from None
    return HiddenStateCapture(engine, va, [str(n) for n in names], None, 1 << 62)


def refusal(params: Any, prompt: Any = None) -> str | None:
    """Why vLLM would refuse these (vLLM) sampling params or this prompt in a resumable request;
    None when it accepts them."""
    if isinstance(prompt, dict) and prompt.get("prompt_embeds") is not None:
        return "prompt_embeds input"
    if getattr(params, "n", 1) > 1:
        return "n > 1"
    if getattr(params, "stop", None):
        return "stop strings"
    kind = getattr(params, "output_kind", None)
    if kind is not None and getattr(kind, "name", "") == "FINAL_ONLY":
        return "final-only output"
    return None


# session key -> the stop token to force while set (read by StopNowProcessor in the engine)
_STOP_NOW: dict[str, int] = {}


class ResumableSession:
    """One live vLLM request on ``engine`` (an ``LLMEngine``): :meth:`append` a chunk and its
    segment's params, feed the engine's outputs of ``request_id`` to :meth:`take`, :meth:`close`
    at the end (frees the KV and the engine's sequence slot: an idle session holds both).

    ``context``: the token ids the engine holds for the request (chunks and segments
    interleaved), plus the segment's last token once it ended (``last_token``, re-fed by the next
    chunk). One chunk at a time: appending while a segment generates raises RuntimeError.

    ``capture`` (:func:`hidden_state_capture`): the request's per-token hidden states, taken with
    :meth:`hidden_states` after each output. Positions run on across chunks (each chunk's rows
    continue the context, the re-fed last token first), so a segment's first take has its chunk's
    rows and each later one the rows of the tokens generated since.
    """

    def __init__(
        self, engine: Any, request_id: str, max_model_len: int, capture: Any = None
    ) -> None:
        from omni_core.kinds import vllm_adapter as va

        self.va = va
        self.engine = engine
        self.request_id = request_id
        self.max_model_len = max_model_len
        self.engine_id: str | None = None  # vLLM's internal id (the request id + a suffix)
        self.context: list[int] = []  # prefilled, or to be, in order
        self.segment: list[int] = []  # the running (or last) segment's tokens
        self.last_token: int | None = None  # the ended segment's last token (not in the KV)
        self.generating = False
        self.segments = 0
        self.prefilled = 0  # tokens this session sent to prefill (chunks and re-fed tokens)
        self.stop_id: int | None = None
        self.capture = capture

    # --- driving -------------------------------------------------------------------------------
    def append(self, prompt: Any, params: Any) -> list[int]:
        """Append ``prompt`` (token ids, text, or ``{"prompt_token_ids"|"prompt": ...,
        "multi_modal_data": ...}``) and generate a segment with ``params`` (vLLM's sampling
        params; per segment: ``max_tokens`` counts this segment's tokens). Returns the context
        this segment is generated over (a copy).

        Raises :class:`PromptTooLongError` when the context, the chunk and ``max_tokens`` exceed
        ``max_model_len`` (nothing reaches vLLM; the session is unchanged), ValueError (or
        vLLM's validation error) for what vLLM refuses."""
        if self.generating:
            raise RuntimeError(f"session {self.request_id}: a segment is still generating")
        head = [] if self.last_token is None else [self.last_token]
        chunk = self._with_head(head, prompt)
        max_tokens = params.max_tokens or 1
        first = self.engine_id is None
        try:
            self.engine_id, ids = self.va.add_resumable(
                self.engine,
                self.request_id,
                chunk,
                params,
                self.engine_id,
                check=lambda ids: self._check_length(len(ids), max_tokens),
            )
        except self.va.VLLMClientError as exc:  # vLLM's own check of the chunk alone
            if not about_prompt_length(exc):
                raise
            raise PromptTooLongError(
                f"request {self.request_id}: the chunk does not fit this stage's max_model_len "
                f"({self.max_model_len} tokens): {exc}"
            ) from exc
        if first and self.capture is not None:
            self.capture.watch(self.engine_id, self.request_id)
        self.context.extend(ids)
        self.prefilled += len(ids)
        self.last_token = None
        self.segment = []
        self.generating = True
        self.segments += 1
        if getattr(params, "extra_args", None) and "omni_stop_now" in params.extra_args:
            self.stop_id = int(params.extra_args["omni_stop_now"])
        return list(self.context)

    def _check_length(self, chunk: int, max_tokens: int) -> None:
        total = len(self.context) + chunk + max_tokens
        if total > self.max_model_len:
            raise PromptTooLongError(
                f"request {self.request_id}: the streamed context does not fit this stage's "
                f"max_model_len ({self.max_model_len} tokens): {len(self.context)} tokens so far "
                f"+ a {chunk}-token chunk + max_tokens {max_tokens} = {total}"
            )

    def _with_head(self, head: list[int], prompt: Any) -> Any:
        """``prompt`` with ``head`` token ids before it (later chunks: no BOS of their own)."""
        if isinstance(prompt, list):
            return head + [int(t) for t in prompt]
        later = bool(self.context)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                ids = [int(t) for t in prompt["prompt_token_ids"]]
                return {**prompt, "prompt_token_ids": head + ids}
            if head or later:
                rest = {k: v for k, v in prompt.items() if k != "prompt"}
                return {**rest, "prompt_token_ids": head + self._encode(prompt["prompt"])}
            return prompt
        if head or later:
            return head + self._encode(str(prompt))
        return prompt  # the first chunk's text: vLLM tokenizes it (with its BOS)

    def _encode(self, text: str) -> list[int]:
        tokenizer = self.engine.get_tokenizer()
        return list(tokenizer.encode(text, add_special_tokens=False))

    def take(self, completion: Any) -> bool:
        """Record one of the engine's outputs of this request (its ``CompletionOutput``, delta
        kind); True when it ended the running segment."""
        self.segment.extend(completion.token_ids)
        if completion.finish_reason is None:
            return False
        self.generating = False
        if self.segment:
            self.context.extend(self.segment[:-1])
            self.last_token = self.segment[-1]
        if self.stop_id is not None:
            _STOP_NOW.pop(self.request_id, None)  # the forced stop ended the segment
        return True

    def hidden_states(self) -> Any:
        """The hidden states (:class:`~omni_core.outputs.HiddenStates`, positions of the whole
        context) computed since the previous call, None if none or without ``capture``. Raises
        the capture's error (OmniError) when positions were skipped."""
        if self.capture is None or self.engine_id is None:
            return None
        return self.capture.take(self.request_id, False)

    def stop_now(self) -> bool:
        """End the running segment on the engine's next step, keeping the KV (needs an engine
        with :func:`stop_now_processor` and a segment whose params came from
        :meth:`stop_params`). False when no segment is generating."""
        if not self.generating:
            return False
        if self.stop_id is None:
            raise RuntimeError(
                f"session {self.request_id}: the segment's params do not allow stop_now "
                "(build them with ResumableSession.stop_params)"
            )
        _STOP_NOW[self.request_id] = self.stop_id
        return True

    def stop_params(self, params: Any, stop_id: int) -> Any:
        """``params`` (vLLM's) made stoppable by :meth:`stop_now` with ``stop_id``."""
        params = params.clone()
        params.stop_token_ids = sorted({*(params.stop_token_ids or ()), stop_id})
        params.extra_args = {**(params.extra_args or {}), "omni_stop_now": stop_id,
                             "omni_session": self.request_id}  # fmt: skip
        return params

    def close(self) -> None:
        """End the request in vLLM (frees its KV and sequence slot); idempotent."""
        _STOP_NOW.pop(self.request_id, None)
        if self.capture is not None:
            self.capture.forget(self.request_id)
        if self.engine_id is not None:
            self.engine.abort_request([self.request_id])
            self.engine_id = None
        self.generating = False


def stop_now_processor() -> type:
    """The logits processor class behind :meth:`ResumableSession.stop_now`: pass it to the
    engine (``logits_processors=[stop_now_processor()]``). Imports vLLM."""
    global _PROCESSOR
    if _PROCESSOR is None:
        _PROCESSOR = _processor_class()
    return _PROCESSOR


_PROCESSOR: type | None = None


def _processor_class() -> type:
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class _StopNow(AdapterLogitsProcessor):
        """Forces the stop token of a session whose stop-now signal is set."""

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> Any:
            extra = getattr(params, "extra_args", None) or {}
            key = extra.get("omni_session")
            if key is None or "omni_stop_now" not in extra:
                return None

            def force(output_ids: list[int], logits: Any) -> Any:
                stop_id = _STOP_NOW.get(key)
                if stop_id is None:
                    return logits
                keep = logits[stop_id].clone()
                logits.fill_(float("-inf"))
                logits[stop_id] = keep if keep.isfinite() else 0.0
                return logits

            return force

    _StopNow.__name__ = _StopNow.__qualname__ = "StopNowProcessor"
    return _StopNow
