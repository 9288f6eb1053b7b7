"""Engine of a ``vllm`` stage process: vLLM's ``LLMEngine`` behind the worker protocol.

``stream`` edges: a streamed-input request is one resumable vLLM request
(:mod:`omni_core.kinds.vllm_session`): each input chunk is appended to it (only the chunk is
prefilled, the KV of everything before is kept) and generates a segment with the request's
params; the context is the interleaved sequence ``chunk 1, segment 1, chunk 2, segment 2, ...``
and the segments are one output stream, which finishes with the last chunk's segment once the
input is closed. The stage caps the running length at ``max_model_len`` (a chunk that would not
fit fails the request with 400 before vLLM sees it: vLLM would kill the engine). Where vLLM
refuses resumable requests (stop strings, ``n > 1``, ``prompt_embeds``; hidden states are not
captured for them either), each chunk runs as its own generation over the chunks received so far
(prefix caching keeps the repeated prefix cheap), as before, and the stage logs it once.

Failures: what vLLM raises while accepting a request (a prompt longer than ``max_model_len``,
sampling values it refuses) fails that request with 400 (:mod:`omni_core.stage.worker` catches
it); an error while taking one request's step output (or starting a streamed request's next
chunk) fails that request here. An exception from vLLM's ``step()`` itself is the engine's: the
replica ends.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from omni_core.errors import RequestError
from omni_core.grammar import GrammarError, grammar_field
from omni_core.kinds.vllm_session import (
    PromptTooLongError,
    ResumableSession,
    about_prompt_length,
    refusal,
)
from omni_core.outputs import StageOutput, TokenLogprob
from omni_core.stage.worker import REQUEST_ERRORS, error_output, injected_fault

logger = logging.getLogger(__name__)

__all__ = ["PromptTooLongError", "VllmWorkerEngine", "build"]


@dataclass
class _Streamed:
    params: Any
    prefix: list[int] = field(default_factory=list)
    pending: deque[Any] = field(default_factory=deque)
    active: str | None = None
    closed: bool = False
    chunks: int = 0
    session: ResumableSession | None = None  # None: each chunk re-prefills (vLLM refuses)
    fresh: bool = False  # the session's next output starts a segment: it carries the prompt ids
    reason: str | None = None  # the last segment's finish reason


class VllmWorkerEngine:
    step_delay_s = 0.0

    def __init__(self, config: dict[str, Any]) -> None:
        args = config["args"]
        hidden = args.get("hidden_states")
        overrides: dict[str, Any] = {}
        if hidden is not None:
            # every prompt position must be computed (VllmArgs checks it)
            overrides["enable_prefix_caching"] = False
            engine = args["engine"]
            if engine.get("enforce_eager") is False and "compilation_config" not in engine:
                # compiled: piecewise graphs at most, a full CUDA graph's replay skips the
                # model's Python forward and with it the capture (no graphs on CPU anyway)
                overrides["compilation_config"] = {"cudagraph_mode": "PIECEWISE"}
        self._open(config, **overrides)
        self.with_payload = args["request_output_payload"]
        self._warm_up()
        self.hidden: Any = None
        if hidden is not None:
            from omni_core.kinds.vllm_hidden import HiddenStateCapture
            from omni_core.stage.dataplane import default_plane

            self.hidden = HiddenStateCapture(
                self.engine, self.va, hidden["layers"], default_plane(), hidden["inline_bytes"]
            )
        from omni_core.kinds.vllm_grammar import install

        self.grammars = install(self.va.structured_output_manager(self.engine))
        # non-streamed requests with a structured output: request id -> (its field, engine id)
        self.grammar_of: dict[str, tuple[str, str]] = {}
        self.dead = False
        self.paused = False
        self.streamed: dict[str, _Streamed] = {}
        self.sub_owner: dict[str, str] = {}  # chunk generation id -> request id
        self.ready: list[StageOutput] = []
        self.fresh: set[str] = set()  # requests whose first output (with the prompt ids) is due
        self.faulty: set[str] = set()  # requests whose next step output raises (testing only)
        self.warned: set[str] = set()  # why streamed input re-prefills, said once each
        # sessions waiting for their next chunk: unfinished in vLLM, but nothing to step
        self.idle: set[str] = set()
        self.prefilled = 0  # prompt tokens sent to prefill (less prefix-cache hits), all requests
        self.steps = 0  # vLLM engine steps taken (omni bench pipeline: steps per request)

    def _open(self, config: dict[str, Any], pooling: bool = False, **overrides: Any) -> None:
        """Build the stage's vLLM engine (``engine``, its adapter ``va``, the errors it raises):
        the stage's ``engine_args`` under ``overrides`` (and the pooling runner's with
        ``pooling``), eager, on the stage's threads (set before vLLM is imported)."""
        import torch

        args = config["args"]
        torch.set_num_threads(args["threads"])  # before vLLM replaces it with a no-op
        from omni_core.kinds import vllm_adapter as va

        self.va = va
        self.request_errors = (*REQUEST_ERRORS, va.VLLMClientError)
        self.fatal_errors = (va.EngineDeadError,)
        if pooling:
            overrides.update(va.pooling_engine_args())
        self.engine = va.build_engine(
            config["model"],
            kv_cache_memory_bytes=args["kv_cache_memory_bytes"],
            max_model_len=args["max_model_len"],
            max_num_seqs=args["max_num_seqs"],
            dtype=args["dtype"],
            seed=args["seed"],
            disable_log_stats=True,
            # eager unless engine.enforce_eager is false (a compiled model class: docs/models.md)
            **{"enforce_eager": True, **args["engine"], **overrides},
        )
        self.max_model_len = args["max_model_len"]

    def _warm_up(self) -> None:
        """One tiny generation at start-up, so the first request does not pay vLLM's lazy init."""
        from omni_core.sampling import SamplingParams

        params = self.va.sampling_params(SamplingParams(max_tokens=2, temperature=0.0))
        self.engine.add_request("omni-warm-up", self.va.to_prompt([1, 2, 3]), params)
        while self.engine.has_unfinished_requests():
            self.engine.step()

    # --- commands ---------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        rid = request.request_id
        if request.streaming_input:
            if self.hidden is not None:
                raise RequestError(
                    f"request {rid}: this stage emits hidden states, which streamed input "
                    "(a stream edge into it) does not support"
                )
            params = self.va.sampling_params(request.params)
            state = _Streamed(params)
            why = refusal(params, request.prompt)
            if why is None:
                state.session = ResumableSession(self.engine, rid, self.max_model_len)
            elif why not in self.warned:
                self.warned.add(why)
                logger.warning(
                    "streamed input with %s: vLLM refuses resumable requests with it, so each "
                    "chunk re-prefills the whole input (said once)",
                    why,
                )
            self.streamed[rid] = state
            self._queue_chunk(rid, state, request.prompt)
        else:
            # Nobody reads this stage's deltas before it finished: one output, at the end.
            final_only = not request.stream_outputs
            vllm = request.params.extra.get("vllm")
            structured = isinstance(vllm, dict) and vllm.get("structured_outputs") is not None
            field = grammar_field(request.params) if structured else None
            try:
                params = self.va.sampling_params(request.params, final_only=final_only)
                self.fresh.add(rid)
                engine_id = self._add_request(
                    rid,
                    self.va.to_prompt(request.prompt),
                    params,
                    trace_headers=request.trace_context,
                )
            except GrammarError:
                raise
            except (ValueError, self.va.VLLMClientError) as exc:  # vLLM's validation
                if field is not None and _about_grammar(exc):
                    logger.warning("request %s: structured output '%s': %s", rid, field, exc)
                    raise GrammarError(f"'{field}': {exc}", param=field) from exc
                raise
            if field is not None:
                self.grammar_of[rid] = (field, engine_id)
        fault = injected_fault(request.params)
        if fault == "add":
            raise RuntimeError(f"fault injected while adding request {rid}")
        if fault == "step":
            self.faulty.add(rid)

    def _add_request(self, rid: str, prompt: Any, params: Any, **kwargs: Any) -> str:
        try:
            engine_id: str = self.engine.add_request(rid, prompt, params, **kwargs)
            if self.hidden is not None:
                self.hidden.watch(engine_id, rid)
            return engine_id
        except self.va.VLLMClientError as exc:
            if about_prompt_length(exc):
                raise PromptTooLongError(
                    f"the prompt does not fit this stage's max_model_len ({self.max_model_len} "
                    f"tokens): {exc}"
                ) from exc
            raise

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.streamed.get(request_id)
        if state is None:
            return
        if prompt:
            self._queue_chunk(request_id, state, prompt)
        if final:
            state.closed = True
            self._maybe_finish(request_id, state)

    def _queue_chunk(self, request_id: str, state: _Streamed, prompt: Any) -> None:
        if state.session is not None:  # the session tokenizes (a later chunk: no BOS)
            state.pending.append(prompt)
        else:
            state.pending.append(prompt if isinstance(prompt, list) else self._encode(prompt))
        self._next_chunk(request_id, state)

    def _encode(self, text: Any) -> list[int]:
        return list(self.engine.get_tokenizer().encode(str(text)))

    def _next_chunk(self, request_id: str, state: _Streamed) -> None:
        if state.session is not None:
            if not state.session.generating and state.pending:
                chunk = state.pending.popleft()
                before = state.session.prefilled
                state.session.append(chunk, state.params)
                self.prefilled += state.session.prefilled - before
                state.fresh = True
            self._mark(request_id, state.session)
            return
        if state.active is not None or not state.pending:
            return
        prefix = state.prefix + state.pending[0]
        # NUL: no run id holds a control character (omni_core.orchestrator.ids)
        sub = f"{request_id}\x00{state.chunks}"
        self._add_request(sub, self.va.to_prompt(prefix), state.params)
        state.pending.popleft()
        state.prefix = prefix
        state.chunks += 1
        state.active = sub
        state.fresh = True
        self.sub_owner[sub] = request_id

    def _mark(self, request_id: str, session: ResumableSession) -> None:
        if session.engine_id is not None and not session.generating:
            self.idle.add(request_id)
        else:
            self.idle.discard(request_id)

    def _busy(self) -> bool:
        """vLLM has a request to step (not only idle sessions)."""
        return self.engine.get_num_unfinished_requests() > len(self.idle)

    def _done(self, state: _Streamed) -> bool:
        busy = state.session.generating if state.session is not None else state.active is not None
        return state.closed and not busy and not state.pending

    def _maybe_finish(self, request_id: str, state: _Streamed) -> None:
        if self._done(state):
            self._end_session(request_id)
            self.ready.append(
                StageOutput(
                    request_id=request_id, finished=True, finish_reason=state.reason or "stop"
                )
            )

    def _end_session(self, request_id: str) -> None:
        state = self.streamed.pop(request_id, None)
        self.idle.discard(request_id)
        if state is not None and state.session is not None:
            state.session.close()

    def abort(self, request_ids: list[str]) -> None:
        ids = list(request_ids)
        for rid in request_ids:
            self.grammar_of.pop(rid, None)
            self.faulty.discard(rid)
            self.fresh.discard(rid)
            self.idle.discard(rid)
            if self.hidden is not None:
                self.hidden.forget(rid)
            state = self.streamed.pop(rid, None)
            if state is not None and state.session is not None:
                state.session.engine_id = None  # aborted below, by its request id
                state.session.close()
            if state is not None and state.active is not None:
                ids.append(state.active)
                self.sub_owner.pop(state.active, None)
        self.engine.abort_request(ids)
        if self.grammars is not None:  # their grammars' compiles stop blocking the others
            self.grammars.prune(self.va.scheduled_request_ids(self.engine))

    def _grammar_failed(self, rid: str) -> GrammarError:
        """Why vLLM ended a structured-output request with ``finish_reason`` "error": its
        grammar failed to compile or admits no output (at the start, or after the tokens it
        took: a dead end), as a 400 naming the request's field; logged once."""
        field, engine_id = self.grammar_of.pop(rid)
        failure = self.grammars.take_failure(engine_id) if self.grammars is not None else None
        why = (
            str(failure)
            if failure is not None
            else (
                "the grammar rejected every next token: it admits no complete output from there "
                "(e.g. a recursive $ref with no way to end)"
            )
        )
        logger.warning("request %s: structured output '%s': %s", rid, field, why)
        return GrammarError(f"'{field}': {why}", param=field)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "sleep":
            self.engine.sleep(*args, **kwargs)
            self.paused = True
            return {"ok": True, "method": method}
        if method == "wake_up":
            tags = args[0] if args else kwargs.get("tags")
            self.engine.wake_up(tags)
            self.paused = False
            return {"ok": True, "method": method}
        if method == "pause_scheduler":
            self.va.pause_scheduler(self.engine)
            self.paused = True
            return {"ok": True, "method": method}
        if method == "resume_scheduler":
            self.va.resume_scheduler(self.engine)
            self.paused = False
            return {"ok": True, "method": method}
        if method == "get_state":
            return {
                "pid": os.getpid(),
                "unfinished": self.engine.get_num_unfinished_requests(),
                "prefilled_tokens": self.prefilled,
                "engine_steps": self.steps,
                "paused": self.paused,
            }
        if method == "die":
            self.dead = True
            return {"dead": True}
        return self.engine.collective_rpc(method, args=tuple(args), kwargs=kwargs)

    # --- stepping -------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.ready) or (not self.paused and self._busy())

    def step(self) -> list[StageOutput]:
        outputs, self.ready = self.ready, []
        if self.paused or not self._busy():
            return outputs
        self.steps += 1
        for ro in self.engine.step():
            owner = self.sub_owner.get(ro.request_id, ro.request_id)
            try:
                self._take(ro, outputs)
            except Exception as exc:  # this request's own failure: it ends, the others go on
                outputs.append(error_output(owner, exc, self.request_errors))
                self.abort([owner])
        outputs.extend(self.ready)
        self.ready = []
        return outputs

    def _take(self, ro: Any, outputs: list[StageOutput]) -> None:
        """Turn one of vLLM's request outputs into ours (and start a streamed request's next
        chunk when its segment, or its chunk generation, finished)."""
        completion = ro.outputs[0]
        rid = ro.request_id
        owner = self.sub_owner.get(rid)
        if self.faulty and (owner or rid) in self.faulty:
            self.faulty.discard(owner or rid)
            raise RuntimeError(f"fault injected while stepping request {owner or rid}")
        finished = ro.finished
        reason = completion.finish_reason
        if finished and rid in self.grammar_of:
            if reason == "error":
                raise self._grammar_failed(rid)
            del self.grammar_of[rid]
        prompt_ids = None
        state = self.streamed.get(owner or rid)
        if state is not None and state.session is not None:  # a resumable request's segment
            if state.fresh:
                state.fresh = False
                prompt_ids = list(state.session.context)
            if finished:  # vLLM ended the request itself (e.g. a grammar refused a token)
                self._end_session(rid)
            elif state.session.take(completion):
                state.reason = reason
                self._next_chunk(rid, state)
                if self._done(state):
                    self._end_session(rid)
                    finished = True
            reason = reason if finished else None
        elif owner is not None:  # a chunk generation of a re-prefilled streamed request
            if state is not None and state.fresh:
                state.fresh = False
                prompt_ids = list(ro.prompt_token_ids or ())
                self.prefilled += len(prompt_ids) - (ro.num_cached_tokens or 0)
            if finished:
                del self.sub_owner[rid]
                if state is not None:
                    state.active = None
                    state.reason = reason
                    self._next_chunk(owner, state)
            finished, reason, rid = False, None, owner
        elif rid in self.fresh:
            self.fresh.discard(rid)
            prompt_ids = list(ro.prompt_token_ids or ())
            self.prefilled += len(prompt_ids) - (ro.num_cached_tokens or 0)
        hidden = self.hidden.take(rid, finished) if self.hidden is not None else None
        outputs.append(
            StageOutput(
                request_id=rid,
                token_ids=list(completion.token_ids),
                text=completion.text,
                payload=ro if self.with_payload else None,
                finished=finished,
                finish_reason=reason if finished else None,
                logprobs=_logprobs(completion.logprobs) if completion.logprobs else None,
                hidden_states=hidden,
                prompt_token_ids=prompt_ids,
            )
        )
        if owner is not None:
            state = self.streamed.get(owner)
            if state is not None:
                self._maybe_finish(owner, state)


_GRAMMAR_WORDS = ("grammar", "schema", "regex", "choice", "structural tag", "structured")


def _about_grammar(exc: BaseException) -> bool:
    """Whether vLLM's validation error is about the request's structured output."""
    text = str(exc).lower()
    return any(word in text for word in _GRAMMAR_WORDS)


def _logprobs(positions: Any) -> list[dict[int, TokenLogprob]]:
    """vLLM's logprobs (a ``Logprob`` per candidate token per position) as our typed ones."""
    return [
        {
            int(token): TokenLogprob(float(lp.logprob), lp.rank, lp.decoded_token)
            for token, lp in candidates.items()
        }
        for candidates in positions
    ]


def build(config: dict[str, Any]) -> VllmWorkerEngine:
    return VllmWorkerEngine(config)
