"""The thinker of ``qwen2.5-omni-duplex`` (speech replies): one resumable vLLM request per duplex
session, **with the thinker's per-token hidden states** for the talker.

The talker's prefill reads, for every position of the thinker's prompt, ``final + embeddings``
and the prompt's token ids (its 3D rope positions), then one row per reply token
(:mod:`omni_qwen.talker`). A resumable request prefills only the new turn, so this engine keeps
each session's rows (:func:`omni_core.extend.hidden_state_capture`: positions run on across
chunks) and sends, with a reply's first output, the rows of the **whole** context from position 0
and the whole context's ids as ``prompt_token_ids``: the talker gets exactly what it gets from a
fresh request over the same conversation (the bridge, ``qwen2.5-omni-talker``, is unchanged).

**Prompt** (the ``qwen2.5-omni`` plug's, :func:`omni_qwen.duplex.build_model`): ``prompt`` /
``multi_modal_data`` (the new turns and the assistant header), ``system``, ``full`` (the whole
conversation rendered as the fallback would send it), ``history`` (the conversation's items before
the new turns, as fingerprints) and ``turns`` (the new turns'). The engine remembers which items
its live request holds (with each reply's text as it emitted it); when the conversation says
otherwise (a reply truncated, an item deleted or added, the session closed for idleness or room,
the first turn) it closes the request and starts a new one from ``full``: the context is always
what the conversation says, and a reply after such a change re-prefills the whole history once.

**Fallback** (``options.resumable: false``, or ``params.extra["duplex_fresh"]`` per request): each
reply is a fresh vLLM request over ``full`` (prefills the whole history every turn), with the same
hidden states and outputs.

Barge-in (abort) forces ``<|im_end|>`` on the next decode step (stop-now, the KV is kept); a turn
past ``max_model_len`` fails with 400 and closes the session's request; idle sessions are closed
(:mod:`omni_qwen.duplex_resumable`, whose engine this extends).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omni_core import RequestError, StageOutput
from omni_core.extend import (
    HiddenStates,
    PromptTooLongError,
    ResumableSession,
    error_output,
    hidden_state_capture,
)
from omni_qwen.duplex_resumable import SESSION_KEY, SessionThinker

logger = logging.getLogger(__name__)

FRESH_KEY = "duplex_fresh"  # params.extra: this reply as a fresh request (the fallback)
LAYERS = ["embeddings", "final"]  # what the talker reads


class SpeechThinker(SessionThinker):
    """:class:`~omni_qwen.duplex_resumable.SessionThinker` with hidden states for a talker."""

    kind = "qwen-duplex-speech-thinker"

    def __init__(self, model: str, options: dict[str, Any]) -> None:
        super().__init__(model, options)
        self.resumable = bool(options.get("resumable", True))
        self.capture = hidden_state_capture(self.engine, list[str | int](LAYERS))
        self.rows: dict[str, list[HiddenStates]] = {}  # session -> its context's rows so far
        self.held: dict[str, list[Any]] = {}  # session -> the items its request holds
        self.reply: dict[str, str] = {}  # session -> the running reply's emitted text
        self.prompts: dict[str, list[int]] = {}  # session/request -> ids its reply is over
        self.fresh: dict[str, bool] = {}  # fallback request -> its first output is due
        self.first: set[str] = set()  # sessions whose reply's next output is its first
        self.resets = 0  # live requests restarted from the whole conversation
        self.trims = 0  # restarts because the conversation outgrew max_model_len
        # after outgrowing max_model_len, the newest items within this share of it are kept
        self.retention = float(options.get("retention", 0.75))
        self.tokenizer = self.engine.get_tokenizer()

    # --- commands ---------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        prompt, extra = request.prompt, request.params.extra or {}
        if not isinstance(prompt, dict) or not isinstance(prompt.get("full"), dict):
            raise RequestError(
                f"{self.kind}: the prompt must be the qwen2.5-omni duplex plug's dict "
                "({'prompt', 'system', 'full', 'history', 'turns', ...})"
            )
        key = extra.get(SESSION_KEY)
        if not self.resumable or extra.get(FRESH_KEY) or not isinstance(key, str) or not key:
            first, _ = self._fit(prompt, request.params.max_tokens or 64)
            self._add_fresh(request.request_id, _from_item(prompt, first), request.params)
            return
        session = self.sessions.get(key)
        if session is not None and session.generating:
            raise RequestError(f"session {key}: a reply is still being generated")
        history, turns = list(prompt.get("history") or ()), list(prompt.get("turns") or ())
        params = self._params(request.params)
        appended = False
        if session is not None and self.held.get(key) == history:
            chunk = self._chunk(session, {k: v for k, v in prompt.items() if k in _CHUNK})
            before = session.prefilled
            try:
                self.prompts[key] = session.append(chunk, session.stop_params(params, self.end_id))
                self.prefilled += session.prefilled - before
                appended = True
            except PromptTooLongError:  # the conversation outgrew the context: start over
                self.trims += 1
                logger.info("duplex session %s: past max_model_len, oldest items left out", key)
            except Exception:
                self._close(key)
                raise
        elif session is not None:
            self.resets += 1
            logger.info("duplex session %s: the conversation changed, re-prefilled", key)
        if not appended:
            self._close(key)
            self._make_room()
            session = ResumableSession(self.engine, key, self.max_model_len, self.capture)
            self.sessions[key] = session
            try:  # the conversation's newest items that fit, system turn first
                self.prompts[key] = self._start(session, prompt, params)
            except Exception:
                self._close(key)
                raise
            self.prefilled += session.prefilled
            self.rows[key] = []
        self.held[key] = history + turns
        self.reply[key] = ""
        self.active[key] = request.request_id
        self.used[key] = time.monotonic()
        self.first.add(key)

    def _start(self, session: ResumableSession, prompt: dict[str, Any], params: Any) -> list[int]:
        """A new live request over the conversation's newest items that fit (:meth:`_fit`); the
        exact count (audio expanded) is vLLM's: if it is over after all, one item fewer."""
        params = session.stop_params(params, self.end_id)
        first, last = self._fit(prompt, params.max_tokens)
        while True:
            try:
                return session.append(_from_item(prompt, first), params)
            except PromptTooLongError as exc:
                if first >= last:
                    raise PromptTooLongError(
                        f"the new turn does not fit the thinker's max_model_len "
                        f"({self.max_model_len} tokens) even without the earlier conversation: "
                        f"{exc}"
                    ) from exc
                first += 1

    def _fit(self, prompt: dict[str, Any], max_tokens: int) -> tuple[int, int]:
        """(the first item to keep, the last one that may be) so that the prompt and
        ``max_tokens`` fit ``max_model_len``: the whole conversation if it fits, else its newest
        items within ``retention`` of it (room for the next turns before leaving out more); the
        new turns are always kept. Counted with the tokenizer, audio by its length."""
        bounds = prompt.get("bounds") or []
        last = len(bounds) - len(prompt.get("turns") or ())
        if not bounds or last <= 0:
            return 0, 0
        full = prompt["full"]
        text = full["prompt"]
        audio = (full.get("multi_modal_data") or {}).get("audio") or []
        ends = [b[0] for b in bounds[1:]] + [len(text)]
        sizes = [self._tokens(text[: bounds[0][0]], [])] + [
            self._tokens(text[b[0] : end], audio[b[1] : nxt])
            for b, end, nxt in zip(
                bounds, ends, [b[1] for b in bounds[1:]] + [len(audio)], strict=True
            )
        ]
        total = sum(sizes) + max_tokens
        if total <= self.max_model_len:
            return 0, last
        budget = self.retention * self.max_model_len
        first = 0
        while first < last and total > budget:
            total -= sizes[1 + first]
            first += 1
        return first, last

    def _tokens(self, text: str, audio: list[Any]) -> int:
        """Tokens of a prompt part: its text, each audio placeholder expanded (Qwen2.5-Omni's
        audio encoder: 100 feature frames a second, two halvings)."""
        n = len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0
        for samples, rate in audio:
            frames = len(samples) * 100 // int(rate)
            n += ((frames - 1) // 2 + 1 - 2) // 2 + 1 - 1  # the placeholder was counted
        return n

    def _add_fresh(self, rid: str, full: dict[str, Any], params: Any) -> None:
        vllm_params = self._params(params)
        vllm_params.stop_token_ids = [self.end_id]
        try:
            engine_id = self.engine.add_request(rid, full, vllm_params)
        except ValueError as exc:  # vLLM's validation: the prompt's length, said its ways
            if getattr(exc, "parameter", None) in ("input_tokens", "input_text"):
                raise PromptTooLongError(
                    f"the conversation does not fit this stage's max_model_len "
                    f"({self.max_model_len} tokens): {exc}"
                ) from exc
            raise
        self.capture.watch(engine_id, rid)
        self.fresh[rid] = True

    def abort(self, request_ids: list[str]) -> None:
        fresh = [rid for rid in request_ids if rid in self.fresh]
        for rid in fresh:
            del self.fresh[rid]
            self.capture.forget(rid)
        if fresh:
            self.engine.abort_request(fresh)
        super().abort(request_ids)

    def _close(self, key: str) -> None:
        super()._close(key)
        for table in (self.rows, self.held, self.reply, self.prompts):
            table.pop(key, None)
        self.first.discard(key)

    def _held_slots(self) -> int:
        return len(self.sessions) + len(self.fresh)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        state = super().rpc(method, args, kwargs)
        if method == "get_state":
            state.update(
                resets=self.resets,
                trims=self.trims,
                fresh=len(self.fresh),
                resumable=self.resumable,
            )
        return state

    # --- stepping -------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.fresh) or super().has_work()

    def step(self) -> list[StageOutput]:
        while (key := self._expired()) is not None:
            logger.info("duplex session %s idle for %.0f s: closed", key, self.idle_s)
            self._close(key)
        self._reclaim()
        outputs, self.ready = self.ready, []
        if not self.active and not self.fresh:
            return outputs
        for ro in self.engine.step():
            key = ro.request_id
            if key in self.fresh:
                rid = key
                try:
                    outputs.append(self._fresh_output(ro))
                except Exception as exc:  # this request's own failure
                    outputs.append(error_output(rid, exc, self.request_errors))
                    self.abort([rid])
                continue
            session, rid = self.sessions.get(key), self.active.get(key)
            if session is None or rid is None:
                continue
            try:
                out = self._session_output(key, session, rid, ro)
            except Exception as exc:  # this session's own failure
                outputs.append(error_output(rid, exc, self.request_errors))
                self._close(key)
                continue
            if out is not None:
                outputs.append(out)
        return outputs

    def _session_output(
        self, key: str, session: ResumableSession, rid: str, ro: Any
    ) -> StageOutput | None:
        states = session.hidden_states()
        if states is not None:
            self.rows[key].append(states)
        completion = ro.outputs[0]
        ended = session.take(completion)
        finished_by_vllm = ro.finished
        if finished_by_vllm:
            ended = True
        if ended:
            self.active.pop(key, None)
        if rid in self.aborted:  # cut: nothing more is sent, the reply holds what was
            if ended:
                self.aborted.discard(rid)
                self._end_reply(key, finished_by_vllm)
            return None
        self.reply[key] = self.reply.get(key, "") + completion.text
        prompt_ids = None
        if key in self.first:  # the whole context's rows and ids, as a fresh request's
            self.first.discard(key)
            prompt_ids = list(self.prompts[key])
            states = _joined(self.rows[key])
        out = StageOutput(
            request_id=rid,
            token_ids=list(completion.token_ids),  # <|im_end|> kept: the talker reads it
            text=completion.text,
            finished=ended,
            finish_reason=(completion.finish_reason or "stop") if ended else None,
            hidden_states=states,
            prompt_token_ids=prompt_ids,
        )
        if ended:
            self._end_reply(key, finished_by_vllm)
        return out

    def _end_reply(self, key: str, closed: bool) -> None:
        """The reply ended: the request holds it (as emitted) after the turns it answered."""
        if closed:  # vLLM ended the request itself: the next turn starts over
            self._close(key)
            return
        self.held.setdefault(key, []).append(["assistant", self.reply.get(key, "")])

    def _fresh_output(self, ro: Any) -> StageOutput:
        rid = ro.request_id
        states = self.capture.take(rid, ro.finished)
        prompt_ids = None
        if self.fresh[rid]:
            self.fresh[rid] = False
            prompt_ids = list(ro.prompt_token_ids or ())
            self.prefilled += len(prompt_ids)
        if ro.finished:
            del self.fresh[rid]
        completion = ro.outputs[0]
        return StageOutput(
            request_id=rid,
            token_ids=list(completion.token_ids),
            text=completion.text,
            finished=ro.finished,
            finish_reason=(completion.finish_reason or "stop") if ro.finished else None,
            hidden_states=states,
            prompt_token_ids=prompt_ids,
        )


_CHUNK = ("prompt", "multi_modal_data", "system")


def _from_item(prompt: dict[str, Any], first: int) -> dict[str, Any]:
    """The whole conversation's prompt (``full``) from item ``first`` on, system turn first."""
    full = prompt["full"]
    if first == 0:
        return dict(full)
    start, audio_from = prompt["bounds"][first]
    text = full["prompt"]
    out: dict[str, Any] = {"prompt": text[: prompt["bounds"][0][0]] + text[start:]}
    audio = (full.get("multi_modal_data") or {}).get("audio") or []
    if audio[audio_from:]:
        out["multi_modal_data"] = {"audio": audio[audio_from:]}
    return out


def _joined(chunks: list[HiddenStates]) -> HiddenStates:
    """A session's row chunks (each continuing the previous) as one, from position 0."""
    import numpy as np

    expected = 0
    for chunk in chunks:
        if chunk.start != expected:
            raise RequestError(f"thinker rows from position {chunk.start}, expected {expected}")
        expected += chunk.rows
    layers = {name: np.concatenate([c.layers[name] for c in chunks]) for name in LAYERS}
    return HiddenStates(0, layers)


def build(config: dict[str, Any]) -> SpeechThinker:
    """The ``torch`` kind's ``engine_args.engine`` (``omni_qwen.duplex_speech:build``)."""
    return SpeechThinker(config["model"], config.get("options") or {})
