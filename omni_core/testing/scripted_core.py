"""The deterministic engine behind the ``scripted`` stage kind (shared by both run modes).

Each request's input arrives as one chunk (``on_finish`` edges) or several (``stream`` edges). For
every input chunk the engine emits ``num_tokens`` tokens, one per step, each a pure function of the
stage name, the chunk and the position: routing is visible in the results. The request finishes
with the last token of the last chunk once its input is closed.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from omni_core.outputs import ErrorInfo, StageOutput

VOCAB = 50_000


class ScriptedArgs(BaseModel):
    """``engine_args`` of a ``scripted`` stage."""

    model_config = ConfigDict(extra="forbid")

    num_tokens: int = Field(
        default=4,
        ge=1,
        description="tokens per input chunk (capped by `max_tokens`); each output's text is "
        "`<stage name>:<token> ` per token",
    )
    delay_s: float = Field(default=0.0, ge=0, description="sleep before each engine step")
    output: Literal["ar", "whole"] = Field(
        default="ar",
        description="`ar`: one output per token; `whole`: one output with every token (and "
        "them as `payload`)",
    )
    process: bool = Field(default=False, description="run each replica in its own OS process")
    fail_after: int | None = Field(
        default=None, ge=0, description="fail each request after N outputs (status 500)"
    )
    die_after: int | None = Field(
        default=None, ge=0, description="the replica dies after N outputs in all"
    )
    hang_after: int | None = Field(
        default=None, ge=0, description="each request stops making progress after N outputs"
    )
    stop_after: int | None = Field(
        default=None,
        ge=1,
        description="each request finishes (`stop`) after N outputs, even with its input still "
        "open (an end of sequence while the upstream still streams)",
    )
    abort_fails: bool = Field(default=False, description="`abort` raises")
    rpc_error: bool = Field(
        default=False, description="control RPCs (sleep, wake_up, pause/resume) raise"
    )
    start_fails: bool = Field(default=False, description="the replica fails to start")
    start_delay_s: float = Field(
        default=0.0, ge=0, description="sleep before start-up (a slow model load)"
    )


def scripted_token(stage_name: str, chunk: list[int], position: int) -> int:
    """Token ``position`` produced by stage ``stage_name`` for an input chunk."""
    seed = zlib.crc32(f"{stage_name}|{','.join(map(str, chunk))}".encode())
    return (seed + position * 7919) % VOCAB


def prompt_tokens(prompt: Any) -> list[int]:
    """Token ids of a prompt as the scripted engine reads it (UTF-8 bytes for text)."""
    if isinstance(prompt, list):
        return [int(t) for t in prompt]
    if isinstance(prompt, str):
        return list(prompt.encode())
    if isinstance(prompt, dict):
        return prompt_tokens(prompt.get("prompt_token_ids", prompt.get("prompt", "")))
    if prompt is None:
        return []
    return list(str(prompt).encode())


@dataclass
class _Request:
    request_id: str
    limit: int
    chunks: deque[list[int]] = field(default_factory=deque)
    input_closed: bool = True
    current: list[int] | None = None
    position: int = 0
    emitted: int = 0
    whole: list[int] = field(default_factory=list)
    fail_after: int | None = None
    fail_status: int = 500
    hang_after: int | None = None


class ScriptedCore:
    """Pure step logic; a driver calls :meth:`step` when :meth:`has_work` is true."""

    CONTROL = ("sleep", "wake_up", "pause_scheduler", "resume_scheduler")

    def __init__(self, stage_name: str, args: ScriptedArgs, replica: int = 0) -> None:
        self.name = stage_name
        self.replica = replica
        self.args = args
        self.running: dict[str, _Request] = {}
        self.total_outputs = 0
        self.dead = False
        self.paused = False
        self.sleeping = False

    # --- commands ---------------------------------------------------------------------------
    def add(
        self,
        request_id: str,
        prompt: Any,
        max_tokens: int | None,
        streaming: bool,
        faults: dict[str, Any] | None = None,
    ) -> None:
        """``faults`` (from ``SamplingParams.extra["scripted"]``) inject per-request faults:
        ``{"fail_after": N, "hang_after": N, "stages": [names]}`` (default: every stage);
        ``"status": S`` is the failure's status code (default 500; 400: the stage refused the
        input, as vLLM refuses a prompt past ``max_model_len``)."""
        limit = (
            self.args.num_tokens if max_tokens is None else min(max_tokens, self.args.num_tokens)
        )
        req = _Request(request_id, limit, input_closed=not streaming)
        req.fail_after, req.hang_after = self.args.fail_after, self.args.hang_after
        if faults and self.name in faults.get("stages", [self.name]):
            req.fail_after = faults.get("fail_after", req.fail_after)
            req.hang_after = faults.get("hang_after", req.hang_after)
            req.fail_status = int(faults.get("status", 500))
        req.chunks.append(prompt_tokens(prompt))
        self.running[request_id] = req

    def add_request(self, request: Any) -> None:
        """Add a :class:`~omni_core.stage.client.StageRequest` (faults from its params)."""
        self.add(
            request.request_id,
            request.prompt,
            request.params.max_tokens,
            request.streaming_input,
            request.params.extra.get("scripted"),
        )

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        req = self.running.get(request_id)
        if req is None:
            return
        tokens = prompt_tokens(prompt)
        if tokens:
            req.chunks.append(tokens)
        if final:
            req.input_closed = True

    def abort(self, request_ids: list[str]) -> None:
        if self.args.abort_fails:
            raise RuntimeError(f"scripted stage '{self.name}': abort_fails is set")
        for rid in request_ids:
            self.running.pop(rid, None)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method in self.CONTROL:
            if self.args.rpc_error:
                raise RuntimeError(f"scripted stage '{self.name}': {method} failed (rpc_error)")
            if method == "sleep":
                self.sleeping = True
            elif method == "wake_up":
                self.sleeping = False
            elif method == "pause_scheduler":
                self.paused = True
            else:
                self.paused = False
            return {"ok": True, "method": method}
        if method == "get_state":
            return {
                "running": sorted(self.running),
                "paused": self.paused,
                "sleeping": self.sleeping,
                "total_outputs": self.total_outputs,
            }
        if method == "die":  # kill this replica (all replicas, or only kwargs["replica"])
            if kwargs.get("replica", self.replica) == self.replica:
                self.dead = True
            return {"dead": self.dead}
        if method == "echo":
            return {"args": list(args), "kwargs": kwargs}
        raise NotImplementedError(f"scripted stage '{self.name}' has no RPC '{method}'")

    # --- stepping -----------------------------------------------------------------------------
    def _can_emit(self, req: _Request) -> bool:
        if req.hang_after is not None and req.emitted >= req.hang_after:
            return False
        return req.current is not None or bool(req.chunks) or req.input_closed

    def has_work(self) -> bool:
        if self.dead or self.paused:
            return False
        return any(self._can_emit(r) for r in self.running.values())

    def step(self) -> list[StageOutput]:
        """One engine step: one new output for every request that can make progress."""
        outputs: list[StageOutput] = []
        for req in list(self.running.values()):
            if self.dead:
                break
            if not self._can_emit(req):
                continue
            out = self._advance(req)
            if out is None:
                continue
            outputs.append(out)
            if out.finished:
                del self.running[req.request_id]
            self.total_outputs += 1
            if self.args.die_after is not None and self.total_outputs >= self.args.die_after:
                self.dead = True
        return outputs

    def _advance(self, req: _Request) -> StageOutput | None:
        rid = req.request_id
        if req.fail_after is not None and req.emitted >= req.fail_after:
            return StageOutput(
                request_id=rid,
                finished=True,
                finish_reason="error",
                error=ErrorInfo(
                    type="ScriptedStageError",
                    message=f"stage '{self.name}' failed request {rid} (fail_after)",
                    status_code=req.fail_status,
                ),
            )
        if req.current is None:
            if not req.chunks:  # input closed, nothing left: finish with an empty output
                return self._finished(req, [])
            req.current, req.position = req.chunks.popleft(), 0
        token = scripted_token(self.name, req.current, req.position)
        req.position += 1
        req.emitted += 1
        chunk_done = req.position >= req.limit
        if chunk_done:
            req.current = None
        last = chunk_done and not req.chunks and req.input_closed
        if self.args.stop_after is not None and req.emitted >= self.args.stop_after:
            last = True
        if self.args.output == "whole":
            req.whole.append(token)
            if not last:
                return None
            return self._finished(req, req.whole, payload=list(req.whole))
        if last:
            return self._finished(req, [token])
        return StageOutput(request_id=rid, token_ids=[token], text=f"{self.name}:{token} ")

    def _finished(self, req: _Request, tokens: list[int], payload: Any = None) -> StageOutput:
        stopped = self.args.stop_after is not None and req.emitted >= self.args.stop_after
        reason = "length" if req.limit < self.args.num_tokens and not stopped else "stop"
        text = "".join(f"{self.name}:{t} " for t in tokens)
        return StageOutput(
            request_id=req.request_id,
            token_ids=list(tokens),
            text=text,
            payload=payload,
            finished=True,
            finish_reason=reason,
        )


class ScriptedWorkerEngine:
    """The scripted engine as a process replica's engine (see :mod:`omni_core.stage.worker`)."""

    def __init__(self, core: ScriptedCore) -> None:
        self.core = core
        self.step_delay_s = core.args.delay_s

    @property
    def dead(self) -> bool:
        return self.core.dead

    def add(self, request: Any) -> None:
        self.core.add_request(request)

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self.core.add_input(request_id, prompt, final)

    def abort(self, request_ids: list[str]) -> None:
        self.core.abort(request_ids)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "get_state":
            import os

            return {**self.core.rpc(method, args, kwargs), "pid": os.getpid()}
        return self.core.rpc(method, args, kwargs)

    def has_work(self) -> bool:
        return self.core.has_work()

    def step(self) -> list[StageOutput]:
        return self.core.step()


def worker_engine(config: dict[str, Any]) -> ScriptedWorkerEngine:
    args = ScriptedArgs.model_validate(config["args"])
    return ScriptedWorkerEngine(ScriptedCore(config["stage_name"], args, config["replica"]))
