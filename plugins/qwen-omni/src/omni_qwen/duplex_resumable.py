"""The conversation in the engine: a Qwen2.5-Omni thinker stage that keeps one resumable vLLM
request per duplex session (``qwen2.5-omni-duplex-text``; text replies, no talker).

Each response is a stage request whose prompt is only the **new** turns (rendered with the chat
template's turn markers) and whose ``params.extra["duplex_session"]`` names the session: the
engine appends it to that session's live request (:class:`omni_core.extend.ResumableSession`),
so only the new turn is prefilled; the reply is the segment generated after it, ended by
``<|im_end|>`` (a stop token: it is re-fed at the head of the next turn, closing the reply in the
context). An abort of the request (barge-in, ``response.cancel``) forces ``<|im_end|>`` on the
next decode step (the stop-now logits processor): the KV is kept, the reply is cut there.

Bounded: a turn that would take the session past ``max_model_len`` fails with 400 (nothing
reaches vLLM, the engine keeps serving) and closes the session's request; a session idle for
``idle_s`` is closed (its KV and ``max_num_seqs`` slot freed), checked on each step and each new
request (the worker sleeps between commands), and a new session with every slot held closes the
least recently used idle one. A closed session's next turn starts a new conversation in the
engine (system turn + the new turn; the earlier turns are not re-sent).

Text only: no talker. ``qwen2.5-omni-duplex`` (speech replies) extends this engine with the
thinker's hidden states for its talker (:mod:`omni_qwen.duplex_speech`). Options: ``max_model_len``,
``idle_s``, ``max_num_seqs``, ``kv_cache_memory_bytes``, ``max_audio`` (audio items per chunk).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omni_core import RequestError, StageOutput
from omni_core.extend import (
    PromptTooLongError,
    ResumableSession,
    TorchStageEngine,
    build_engine,
    error_output,
    stop_now_processor,
)

logger = logging.getLogger(__name__)

SESSION_KEY = "duplex_session"
END_OF_TURN = "<|im_end|>"


class SessionThinker(TorchStageEngine):
    """One resumable request per duplex session on an in-process vLLM engine."""

    kind = "qwen-duplex-thinker"
    request_errors = (ValueError, OverflowError, RequestError)

    def __init__(self, model: str, options: dict[str, Any]) -> None:
        self.max_model_len = int(options.get("max_model_len", 2048))
        self.idle_s = float(options.get("idle_s", 300.0))
        self.max_num_seqs = int(options.get("max_num_seqs", 8))
        self.engine = build_engine(
            model,
            dtype="float32",
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=True,
            kv_cache_memory_bytes=int(options.get("kv_cache_memory_bytes", 64 << 20)),
            disable_log_stats=True,
            enable_prefix_caching=False,
            limit_mm_per_prompt={"audio": int(options.get("max_audio", 1)), "image": 0, "video": 0},
            logits_processors=[stop_now_processor()],
        )
        tokenizer = self.engine.get_tokenizer()
        self.end_id = int(tokenizer.convert_tokens_to_ids(END_OF_TURN))
        self.sessions: dict[str, ResumableSession] = {}
        self.used: dict[str, float] = {}  # session -> last activity (monotonic)
        self.active: dict[str, str] = {}  # session -> the request its segment answers
        self.aborted: set[str] = set()  # requests whose segment is being stopped
        self.prefilled = 0
        self.trims = 0  # conversations restarted because they outgrew max_model_len
        self.ready: list[StageOutput] = []

    # --- commands ---------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        key = (request.params.extra or {}).get(SESSION_KEY)
        if not isinstance(key, str) or not key:
            raise RequestError(f"request {request.request_id}: extra.{SESSION_KEY} is required")
        session = self.sessions.get(key)
        if session is None:
            self._make_room()
            session = self.sessions[key] = ResumableSession(self.engine, key, self.max_model_len)
        if session.generating:
            raise RequestError(f"session {key}: a reply is still being generated")
        params = session.stop_params(self._params(request.params), self.end_id)
        before = session.prefilled
        try:
            session.append(self._chunk(session, request.prompt), params)
        except PromptTooLongError:
            self._close(key)  # the conversation no longer fits: it starts over from this turn
            if not before:
                raise  # the turn alone does not fit: it fails, alone
            logger.info("duplex session %s: past max_model_len, a new conversation", key)
            self.trims += 1
            self._make_room()
            session = self.sessions[key] = ResumableSession(self.engine, key, self.max_model_len)
            params = session.stop_params(self._params(request.params), self.end_id)
            before = 0
            try:
                session.append(self._chunk(session, request.prompt), params)
            except Exception:
                self._close(key)
                raise
        self.prefilled += session.prefilled - before
        self.active[key] = request.request_id
        self.used[key] = time.monotonic()

    def _chunk(self, session: ResumableSession, prompt: Any) -> Any:
        """The plug's ``{"prompt": new turns, "system": ..., "multi_modal_data"?}`` as this
        session's next chunk: the system turn first in a new session; else after the previous
        reply's end of turn (re-fed by the session when the reply ended on it)."""
        if not isinstance(prompt, dict) or "prompt" not in prompt:
            raise RequestError("qwen-duplex-thinker: the prompt must be {'prompt': text, ...}")
        chunk = dict(prompt)
        system, text = chunk.pop("system", ""), chunk["prompt"]
        if session.engine_id is None:
            text = f"<|im_start|>system\n{system}{END_OF_TURN}\n" + text
        elif session.last_token == self.end_id:
            text = "\n" + text
        else:  # the reply ended on its length limit: close it
            text = f"{END_OF_TURN}\n" + text
        chunk["prompt"] = text
        return chunk

    def _params(self, params: Any) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            temperature=params.temperature if params.temperature is not None else 0.0,
            top_p=params.top_p if params.top_p is not None else 1.0,
            max_tokens=params.max_tokens or 64,
            seed=params.seed,
            output_kind=RequestOutputKind.DELTA,
        )

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise RequestError("qwen-duplex-thinker takes whole turns, not streamed input")

    def abort(self, request_ids: list[str]) -> None:
        for key, rid in list(self.active.items()):
            if rid in request_ids:
                self.aborted.add(rid)
                self.sessions[key].stop_now()  # ends on the next step; the KV is kept

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "get_state":
            return {
                "prefilled_tokens": self.prefilled,
                "trims": self.trims,
                "sessions": len(self.sessions),
                "unfinished": self.engine.get_num_unfinished_requests(),
                "contexts": {k: len(s.context) for k, s in self.sessions.items()},
                "generating": sorted(k for k, s in self.sessions.items() if s.generating),
            }
        return super().rpc(method, args, kwargs)

    # --- stepping -------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.ready) or bool(self.active) or self._expired() is not None

    def _expired(self) -> str | None:
        now = time.monotonic()
        for key, used in self.used.items():
            if key not in self.active and now - used > self.idle_s:
                return key
        return None

    def _make_room(self) -> None:
        """Before a new session: close the idle-expired ones, then, with every sequence slot
        held, the least recently used idle one (an idle session holds a slot and its KV; the
        worker sleeps between commands, so expiry is also checked here)."""
        while (key := self._expired()) is not None:
            self._close(key)
        idle = sorted((used, key) for key, used in self.used.items() if key not in self.active)
        if len(self.sessions) >= self.max_num_seqs and idle:
            logger.info(
                "duplex session %s closed: all %d slots held", idle[0][1], self.max_num_seqs
            )
            self._close(idle[0][1])

    def _held_slots(self) -> int:
        """vLLM requests this engine keeps (each holds, or waits for, a sequence slot)."""
        return len(self.sessions)

    def _reclaim(self) -> None:
        """More requests than sequence slots (a turn waits in vLLM's queue): close the least
        recently used idle sessions, at once, as each goes idle (not after ``idle_s``)."""
        while self._held_slots() > self.max_num_seqs:
            idle = [(used, key) for key, used in self.used.items() if key not in self.active]
            if not idle:
                return
            key = min(idle)[1]
            logger.info("duplex session %s closed: a waiting turn takes its slot", key)
            self._close(key)

    def _close(self, key: str) -> None:
        session = self.sessions.pop(key, None)
        self.used.pop(key, None)
        self.active.pop(key, None)
        if session is not None:
            session.close()

    def step(self) -> list[StageOutput]:
        while (key := self._expired()) is not None:
            logger.info(
                "duplex session %s idle for %.0f s: its request is closed", key, self.idle_s
            )
            self._close(key)
        self._reclaim()
        outputs, self.ready = self.ready, []
        if not self.active:
            return outputs
        for ro in self.engine.step():
            key = ro.request_id
            session, rid = self.sessions.get(key), self.active.get(key)
            if session is None or rid is None:
                continue
            try:
                completion = ro.outputs[0]
                ended = session.take(completion)
                if ro.finished:  # vLLM ended the request itself
                    self._close(key)
                    ended = True
                if rid in self.aborted:
                    if ended:
                        self.aborted.discard(rid)
                        self.active.pop(key, None)
                    continue
                ids = list(completion.token_ids)
                if ended:
                    self.active.pop(key, None)
                    if ids and ids[-1] == self.end_id:
                        ids = ids[:-1]  # the end-of-turn marker is not part of the reply
                outputs.append(
                    StageOutput(
                        request_id=rid,
                        token_ids=ids,
                        text=completion.text,
                        finished=ended,
                        finish_reason=(completion.finish_reason or "stop") if ended else None,
                    )
                )
            except Exception as exc:  # this session's own failure
                outputs.append(error_output(rid, exc, self.request_errors))
                self._close(key)
        return outputs


def build(config: dict[str, Any]) -> SessionThinker:
    """The ``torch`` kind's ``engine_args.engine`` (``omni_qwen.duplex_resumable:build``)."""
    return SessionThinker(config["model"], config.get("options") or {})
