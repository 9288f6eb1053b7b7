"""``Terminals``: how runs end — failure, abort, deadline — and the one place a run turns terminal.

Fires ``omni_expand_abort`` (on every abort) and ``omni_request_terminal`` (once per run, after
the subclass's ``on_runs_ended`` seam); neither can be switched off by a subclass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from omni_core.errors import EngineDeadError
from omni_core.outputs import AbortResult, ErrorInfo, OmniRequestOutput

if TYPE_CHECKING:
    from omni_core.orchestrator.context import PartContext
    from omni_core.orchestrator.state import ParentState, RunState, StageRun

logger = logging.getLogger(__name__)


class Terminals:
    def __init__(self, ctx: PartContext) -> None:
        self.pipeline = ctx.pipeline
        self.pools = ctx.pools
        self.table = ctx.table
        self.emitter = ctx.emitter
        self.tasks = ctx.tasks
        self.hooks = ctx.hooks
        self.port = ctx.port
        self.runs_ended = ctx.seams.runs_ended  # the subclass's seam, None if not overridden

    # ------------------------------------------------------------------------------------------
    # failure
    # ------------------------------------------------------------------------------------------
    async def fail(self, run: RunState, stage_id: int, error: ErrorInfo) -> None:
        """Request-scoped failure: the whole request (all its runs) gets one error terminal."""
        owner = run.companion_of or run
        if owner.terminal:
            return
        parent = owner.parent
        victims: dict[str, RunState] = {}
        for run_id in sorted(parent.live):
            self.table.collect(self.table.runs[run_id], victims)
        await self.physical_abort(list(victims.values()))
        if not parent.live:
            return  # it reached its terminal (finished, aborted, failed) while the abort ran
        for victim in victims.values():
            if not victim.terminal:
                self.terminate(victim, "error", error)
        self.emit_error(parent, owner.index, stage_id, error)

    def emit_error(self, parent: ParentState, index: int, stage_id: int, error: ErrorInfo) -> None:
        """The request's one error terminal (also for a request refused before admission)."""
        stage = self.pipeline.stages[stage_id]
        self.emitter.emit(
            parent.stream,
            OmniRequestOutput(
                request_id=parent.request_id,
                index=index,
                stage_id=stage_id,
                stage_name=stage.name,
                output_type=stage.config.final_output_type,
                finished=True,
                finish_reason="error",
                error=error,
            ),
        )

    # ------------------------------------------------------------------------------------------
    # abort
    # ------------------------------------------------------------------------------------------
    async def abort(self, request_ids: list[str], reason: str = "abort") -> AbortResult:
        """Abort requests (parent ids, child ids or companion ids); unknown ids are ignored.

        The physical abort on every replica that holds a request happens first; only if all of
        them succeeded is the request's state dropped and its abort outputs emitted.
        """
        ids = list(request_ids)
        ids.extend(self.hooks.expand_abort(ids, self.port))
        runs = self.table.resolve(ids)
        if not runs:
            return AbortResult(success=True)
        error = await self.physical_abort(list(runs.values()))
        if error is not None:
            return AbortResult(success=False, error=error)
        outputs = []
        for run in runs.values():
            if run.terminal or not run.visible:
                continue
            outputs.extend(self._abort_outputs(run, reason))
            self.terminate(run, reason, None)
        for run in runs.values():  # companions of surviving parents
            if not run.terminal:
                self.terminate(run, reason, None)
        return AbortResult(success=True, outputs=outputs)

    async def physical_abort(self, runs: list[RunState]) -> str | None:
        """Abort ``runs`` at every replica still working on them; None, or what failed."""
        groups: dict[tuple[int, int], list[tuple[RunState, StageRun]]] = {}
        for run in runs:
            for sid, sr in run.stages.items():
                if sr.submitted and not sr.finished and not sr.aborted and sr.replica is not None:
                    groups.setdefault((sid, sr.replica), []).append((run, sr))
        errors = []
        for (sid, replica), members in groups.items():
            client = self.pools[sid].client(replica)
            if client is not None:
                try:
                    await client.abort([run.run_id for run, _ in members])
                except EngineDeadError:
                    pass  # the replica is gone: nothing left to stop there
                except Exception as exc:
                    name = self.pools[sid].stage.name
                    errors.append(f"stage '{name}' replica {replica}: {type(exc).__name__}: {exc}")
                    continue
            for _, sr in members:
                sr.aborted = True
        return "; ".join(errors) if errors else None

    def _abort_outputs(self, run: RunState, reason: str) -> list[OmniRequestOutput]:
        """One abort output per unfinished final stage, in stage order; the last may be terminal.

        AR stages carry the generated prefix; whole-output stages carry nothing and say
        ``whole_sample_retry``.
        """
        pending = [sid for sid in run.finals if sid not in run.finished_finals] or [run.finals[-1]]
        last_of_request = run.parent.live == {run.run_id}
        outputs = []
        for i, sid in enumerate(pending):
            stage = self.pipeline.stages[sid]
            result = run.stages[sid].result
            whole = stage.output_mode == "whole"
            output = OmniRequestOutput(
                request_id=run.parent.request_id,
                index=run.index,
                stage_id=sid,
                stage_name=stage.name,
                output_type=stage.config.final_output_type,
                finished=last_of_request and i == len(pending) - 1,
                finish_reason=reason,
                text="" if whole else result.text,
                token_ids=[] if whole else list(result.token_ids),
                logprobs=None if whole or not result.logprobs else list(result.logprobs),
                whole_sample_retry=whole,
            )
            outputs.append(output)
            self.emitter.emit(run.parent.stream, output)
        return outputs

    # ------------------------------------------------------------------------------------------
    # the terminal
    # ------------------------------------------------------------------------------------------
    def terminate(self, run: RunState, finish_reason: str, error: ErrorInfo | None) -> None:
        """The one place a run becomes terminal: tables, bindings, companions, parent, hooks.

        Every stage still working on the run (an upstream stream source of a final stage that
        ended first, a companion's stages) is aborted at its replica. The abort is started before
        the terminal is handed to the caller (the task's first step runs before the emitter's
        flush), so a caller reusing the id at once is not hit by it.
        """
        if run.terminal:
            return
        run.terminal = True
        table = self.table
        table.runs.pop(run.run_id, None)
        for sid, sr in run.stages.items():
            if sr.replica is not None:
                table.unbind(sid, sr.replica, run.run_id)
        if not self.tasks.stopping and _still_working(run):
            self.tasks.spawn(self._abort_quietly(run))
        for companion in run.companions:
            if not companion.terminal:
                self.terminate(companion, finish_reason, error)
        self.table.release(run)
        if self.runs_ended is not None:
            self.runs_ended([run.run_id], finish_reason, error)
        self.hooks.request_terminal(run.run_id, run, finish_reason, error, self.port)

    async def _abort_quietly(self, run: RunState) -> None:
        error = await self.physical_abort([run])
        if error:
            logger.warning("abort of terminal run %s failed: %s", run.run_id, error)

    # ------------------------------------------------------------------------------------------
    # deadlines
    # ------------------------------------------------------------------------------------------
    def arm_deadline(self, parent: ParentState, seconds: float) -> None:
        """Abort the request with reason ``timeout`` after ``seconds`` unless it ended before."""
        parent.deadline = self.tasks.loop.call_later(seconds, self._on_deadline, parent.request_id)

    def _on_deadline(self, request_id: str) -> None:
        if request_id in self.table.parents:
            self.tasks.spawn(self._expire(request_id))

    async def _expire(self, request_id: str) -> None:
        result = await self.abort([request_id], reason="timeout")
        if not result.success:
            logger.warning("deadline abort of %s failed: %s", request_id, result.error)
        self.emitter.flush()


def _still_working(run: RunState) -> bool:
    """Whether a stage replica may still be producing for ``run``."""
    for s in run.stages.values():  # a loop, not any(generator): every terminal asks
        if s.submitted and not s.finished and not s.aborted:
            return True
    return False
