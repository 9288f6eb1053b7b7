"""The ``reverse`` stage kind: streams the input's token ids back reversed, one per output.

An in-process replica built on :class:`omni_core.stage.local.LocalStageClient`: every request
runs as an asyncio task on the orchestrator loop and appends its outputs to the client's outbox,
which the orchestrator's reader for this replica drains. The client only moves data in and out
and manages its own lifecycle; which stage comes next is the orchestrator's business.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from omni_core import ErrorInfo, StageOutput
from omni_core.extend import LocalStageClient, StageContext, StageRequest


class ReverseArgs(BaseModel):
    """``engine_args`` of a ``reverse`` stage (unknown fields fail validation)."""

    model_config = ConfigDict(extra="forbid")

    delay_s: float = Field(default=0.0, ge=0, description="pause before each output")


def prompt_token_ids(prompt: Any) -> list[int]:
    """Token ids of a prompt: a list of ints as is, text as its UTF-8 bytes.

    A dict prompt must carry ``prompt_token_ids`` or ``prompt``; anything else is a bad request.
    """
    if isinstance(prompt, list):
        return [int(t) for t in prompt]
    if isinstance(prompt, str):
        return list(prompt.encode())
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            return prompt_token_ids(prompt["prompt_token_ids"])
        if "prompt" in prompt:
            return prompt_token_ids(prompt["prompt"])
        raise ValueError("a dict prompt needs 'prompt_token_ids' or 'prompt'")
    raise ValueError(f"cannot read token ids from a {type(prompt).__name__} prompt")


@dataclass(eq=False)
class _Job:
    tokens: list[int]
    max_tokens: int | None
    input_closed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ReverseStageClient(LocalStageClient):
    """One replica of a ``reverse`` stage."""

    def __init__(self, label: str, args: ReverseArgs) -> None:
        super().__init__(label)
        self._args = args
        self._jobs: dict[str, _Job] = {}

    async def add_request(self, request: StageRequest) -> None:
        self.check_alive()  # a dead or closed replica raises EngineDeadError
        # Raising here (a bad prompt) fails only this request, with status 400.
        job = _Job(prompt_token_ids(request.prompt), request.params.max_tokens)
        if not request.streaming_input:
            job.input_closed.set()
        job.task = asyncio.get_running_loop().create_task(self._run(request.request_id, job))
        self._jobs[request.request_id] = job

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        """More input through a ``stream`` edge: reversing needs all of it, so buffer it."""
        self.check_alive()
        job = self._jobs.get(request_id)
        if job is None:
            return  # aborted meanwhile
        job.tokens.extend(prompt_token_ids(prompt))
        if final:
            job.input_closed.set()

    async def _run(self, request_id: str, job: _Job) -> None:
        try:
            await job.input_closed.wait()
            tokens = job.tokens[::-1]
            limit = len(tokens) if job.max_tokens is None else min(job.max_tokens, len(tokens))
            reason = "length" if limit < len(tokens) else "stop"
            if limit == 0:
                self.emit(StageOutput(request_id=request_id, finished=True, finish_reason=reason))
            for i, token in enumerate(tokens[:limit]):
                await asyncio.sleep(self._args.delay_s)  # also yields to the loop
                last = i == limit - 1
                self.emit(
                    StageOutput(
                        request_id=request_id,
                        token_ids=[token],
                        text=f"{token} ",
                        finished=last,
                        finish_reason=reason if last else None,
                    )
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a request-scoped failure: only this request ends
            self.emit(
                StageOutput(
                    request_id=request_id,
                    finished=True,
                    finish_reason="error",
                    error=ErrorInfo.from_exception(exc),
                )
            )
        finally:
            if self._jobs.get(request_id) is job:
                del self._jobs[request_id]

    async def abort(self, request_ids: list[str]) -> None:
        """Stop work on these ids; unknown ids are ignored. Emits nothing for them."""
        for request_id in request_ids:
            job = self._jobs.pop(request_id, None)
            if job is not None and job.task is not None:
                job.task.cancel()

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if method == "get_state":
            return {"running": sorted(self._jobs)}
        return await super().collective_rpc(method, args, kwargs)  # NotImplementedError

    async def shutdown(self) -> None:
        for job in self._jobs.values():
            if job.task is not None:
                job.task.cancel()
        self._jobs.clear()
        await super().shutdown()


def make_reverse_client(stage: Any, replica: int, context: StageContext) -> ReverseStageClient:
    """The ``client_factory`` of the kind: one client per replica, on the orchestrator thread."""
    args = ReverseArgs.model_validate(stage.engine_args)
    return ReverseStageClient(f"stage '{stage.name}' replica {replica}", args)
