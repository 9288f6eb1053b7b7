"""What stages emit and what callers receive."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

ErrorClass = type[BaseException]  # (``type`` is a field name inside ErrorInfo)
OutputKind = Literal["audio", "image", "text", "tokens", "payload"]
"""What a :class:`StageOutput` carries (:attr:`StageOutput.output_type`)."""


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A request-scoped failure: ``type`` (error class name), ``message``, HTTP-like status code.

    ``classes`` names the error's class and its bases up to (not including) ``Exception``, so
    that :meth:`is_a` matches a class and its subclasses across processes; build one with
    :meth:`from_exception` (the status code and ``retryable`` default to the exception's class
    attributes where it has them, e.g. :class:`~omni_core.errors.StageUnavailableError`: 503,
    retryable). ``param``: the request field it names, where the exception says (a
    :class:`~omni_core.errors.RequestError`'s ``param``, vLLM's validation error's
    ``parameter``).
    """

    type: str
    message: str
    status_code: int = 500
    retryable: bool = False
    classes: tuple[str, ...] = ()
    param: str | None = None

    @classmethod
    def from_exception(
        cls, exc: BaseException, status_code: int | None = None, retryable: bool | None = None
    ) -> ErrorInfo:
        if status_code is None:
            status_code = getattr(exc, "status_code", None)
            status_code = status_code if isinstance(status_code, int) else 500
        if retryable is None:
            retryable = bool(getattr(exc, "retryable", False))
        return cls(
            type=type(exc).__name__,
            message=str(exc),
            status_code=status_code,
            retryable=retryable,
            classes=_class_names(type(exc)),
            param=_param_of(exc),
        )

    def is_a(self, error_class: ErrorClass) -> bool:
        """Whether the error was an ``error_class`` (or a subclass of it) when it was raised."""
        name = error_class.__name__
        return name == self.type or name in self.classes


def _class_names(error_class: type[BaseException]) -> tuple[str, ...]:
    return tuple(
        c.__name__
        for c in error_class.__mro__
        if issubclass(c, BaseException) and c not in (Exception, BaseException)
    )


@dataclass
class HiddenStates:
    """Per-token hidden states a ``vllm`` stage emits with ``engine_args.hidden_states``.

    ``layers`` maps each configured layer's name (``embeddings``, ``final``) to a float32 array
    ``[rows, hidden]``: the states of sequence positions ``start`` .. ``start + rows - 1`` (prompt
    positions first, then the generated tokens in order). The last sampled token of a request is
    never forwarded, so a request has ``prompt_len + generated - 1`` rows in all. While in
    transit between processes a large array is a data-plane handle (the receiving client takes
    it, so callers always see arrays).
    """

    start: int
    layers: dict[str, Any]

    @property
    def rows(self) -> int:
        return len(next(iter(self.layers.values()))) if self.layers else 0


def join_hidden_states(chunks: Sequence[HiddenStates]) -> dict[str, Any]:
    """A request's hidden-state chunks (in arrival order) as one array ``[rows, hidden]`` per
    layer, from position 0. Raises ValueError if a chunk does not follow the previous one."""
    import numpy as np

    parts: dict[str, list[Any]] = {}
    expected = 0
    for chunk in chunks:
        if chunk.start != expected:
            raise ValueError(f"hidden states chunk starts at {chunk.start}, expected {expected}")
        expected += chunk.rows
        for name, array in chunk.layers.items():
            parts.setdefault(name, []).append(array)
    return {name: np.concatenate(arrays) for name, arrays in parts.items()}


class TokenLogprob(msgspec.Struct, array_like=True, gc=False):
    """One candidate token's log probability at one position (as vLLM's ``Logprob``: the same
    attribute names): ``rank`` in the vocabulary, ``decoded_token`` its text when known."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class StageOutput(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    """One output of a stage replica for one request: a delta, as a streaming engine emits it.

    ``token_ids`` and ``text`` are the *new* tokens/text. ``payload`` is the engine's own object
    (vLLM's ``RequestOutput``, an audio array, an image ...). ``hidden_states``: the per-token
    states of the positions this output covers (a ``vllm`` stage with ``hidden_states``
    configured; else None). ``error`` set means the request failed in this stage
    (request-scoped). ``logprobs``: per new token, candidate token id → :class:`TokenLogprob`
    (when the request asked for them). ``prompt_token_ids``: the prompt as the engine tokenized
    it, on a request's first output only (stages that know it: ``vllm``).

    Like the other per-token structs here it is not tracked by the cyclic garbage collector
    (``gc=False``: one output per token would otherwise drive most collections); nothing in
    omni-core makes a reference cycle through one, and a payload must not either. It crosses the
    stage-process wire as it is (:mod:`omni_core.stage.wire`): a MessagePack array of its fields,
    decoded straight into this type (``array_like``).
    """

    request_id: str
    token_ids: list[int] = msgspec.field(default_factory=list)
    text: str = ""
    payload: Any = None
    finished: bool = False
    finish_reason: str | None = None
    logprobs: list[dict[int, TokenLogprob]] | None = None
    error: ErrorInfo | None = None
    hidden_states: HiddenStates | None = None
    prompt_token_ids: list[int] | None = None

    @property
    def output_type(self) -> OutputKind | None:
        """What this delta carries, read from its content (no field, nothing on the wire):
        ``"audio"`` (``payload`` is an :class:`~omni_core.media.AudioChunk`: ``samples`` a
        float32 array, ``sample_rate``), ``"image"`` (an :class:`~omni_core.media.Image`),
        ``"text"`` (new ``text``), ``"tokens"`` (new ``token_ids``, no text), ``"payload"``
        (another engine object), ``None`` (nothing new: a bare finish or an error)."""
        payload = self.payload
        if payload is not None:
            from omni_core.media import AudioChunk, Image

            if isinstance(payload, AudioChunk):
                return "audio"
            if isinstance(payload, Image):
                return "image"
        if self.text:
            return "text"
        if self.token_ids:
            return "tokens"
        return None if payload is None else "payload"


class StageResult(msgspec.Struct, kw_only=True, gc=False):
    """Everything one stage produced so far for one request; what bridges receive.

    ``payloads`` and ``logprobs`` are sequences: an empty tuple until the stage produced one (most
    stages never do, and a list per request and stage would be two more objects to allocate and
    for the garbage collector to scan).
    """

    stage_id: int
    stage_name: str
    token_ids: list[int] = msgspec.field(default_factory=list)
    text: str = ""
    payloads: Sequence[Any] = ()
    logprobs: Sequence[Any] = ()
    hidden_states: Sequence[HiddenStates] = ()  # chunks in order: see join_hidden_states
    finished: bool = False
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None  # the stage's prompt, tokenized (see StageOutput)

    def add(self, out: StageOutput) -> None:
        if out.token_ids:
            self.token_ids.extend(out.token_ids)
        if out.text:
            self.text += out.text
        if out.payload is not None:
            if isinstance(self.payloads, list):
                self.payloads.append(out.payload)
            else:
                self.payloads = [*self.payloads, out.payload]
        if out.logprobs:
            if isinstance(self.logprobs, list):
                self.logprobs.extend(out.logprobs)
            else:
                self.logprobs = [*self.logprobs, *out.logprobs]
        if out.hidden_states is not None:
            self.hidden_states = [*self.hidden_states, out.hidden_states]
        if out.prompt_token_ids is not None:
            self.prompt_token_ids = out.prompt_token_ids
        if out.finished:
            self.finished = True
            self.finish_reason = out.finish_reason


class OmniRequestOutput(msgspec.Struct, kw_only=True, gc=False):
    """One output a caller receives from ``generate()``.

    ``finished`` is request-terminal: exactly one output per request has it set (or ``generate()``
    raises :class:`~omni_core.errors.EngineDeadError`). ``finish_reason`` is set on the last
    output of each final stage (``stop``, ``length``, ``abort``, ``timeout``, ``error``).
    ``text``/``token_ids`` are deltas, except on an abort output, which carries the whole
    generated prefix. ``whole_sample_retry`` marks the abort of a whole-output (diffusion-type)
    stage: no partial result exists, the sample must be redone. Not tracked by the cyclic garbage
    collector (``gc=False``): do not build reference cycles through one.
    """

    request_id: str
    stage_id: int
    stage_name: str
    output_type: str
    index: int = 0
    finished: bool = False
    finish_reason: str | None = None
    text: str = ""
    token_ids: list[int] = msgspec.field(default_factory=list)
    payload: Any = None
    logprobs: list[Any] | None = None
    error: ErrorInfo | None = None
    whole_sample_retry: bool = False
    metrics: dict[str, float] = msgspec.field(default_factory=dict)
    hidden_states: HiddenStates | None = None


class AbortResult(msgspec.Struct, kw_only=True):
    """Answer of ``abort_async``: ``outputs`` are the abort outputs the callers also received."""

    success: bool
    error: str | None = None
    outputs: list[OmniRequestOutput] = msgspec.field(default_factory=list)


def _param_of(exc: BaseException) -> str | None:
    param = getattr(exc, "param", None) or getattr(exc, "parameter", None)
    return param if isinstance(param, str) else None
