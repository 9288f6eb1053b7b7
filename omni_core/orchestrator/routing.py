"""Cross-stage routing: submit, route outputs along the graph, emit in order, converge terminals.

Part of :class:`~omni_core.orchestrator.base.OrchestratorBase` (split out to keep modules small);
runs only on the orchestrator loop.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from omni_core.config.pipeline import InputEdge
from omni_core.errors import EngineDeadError, StageUnavailableError
from omni_core.orchestrator.gates import ask_gates
from omni_core.orchestrator.graph import StageGraph
from omni_core.orchestrator.state import ParentState, RunState, StageRun
from omni_core.outputs import ErrorInfo, OmniRequestOutput, StageOutput, StageResult
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.orchestrator.emit import Emitter
    from omni_core.outputs import AbortResult
    from omni_core.plugin.hooks import PluginHost
    from omni_core.stage.pool import StagePool

logger = logging.getLogger(__name__)


class RoutingMixin:
    """Routing half of OrchestratorBase; what it uses from the other half is declared here."""

    if TYPE_CHECKING:
        pipeline: ResolvedPipeline
        pools: dict[int, StagePool]
        hooks: PluginHost
        emitter: Emitter
        parents: dict[str, ParentState]
        runs: dict[str, RunState]
        _stop: asyncio.Event
        loop: asyncio.AbstractEventLoop
        streamed_stages: frozenset[int]  # stages whose deltas are read even when not final

        def spawn(
            self, coro: Coroutine[Any, Any, Any], name: str | None = None
        ) -> asyncio.Task[Any]: ...
        async def _on_replica_dead(
            self, pool: StagePool, replica: int, exc: BaseException
        ) -> None: ...
        async def _handle_forward_failure(
            self, run: RunState, stage_id: int, exc: BaseException
        ) -> bool: ...
        def _intercept_stage_output(
            self, run: RunState, stage_id: int, output: StageOutput
        ) -> bool: ...
        def _on_stage_submitted(self, run: RunState, stage_id: int, replica: int) -> None: ...
        def _cleanup_request_ids(
            self, run_ids: list[str], finish_reason: str, error: ErrorInfo | None
        ) -> None: ...
        def _collect_runs(self, run: RunState, into: dict[str, RunState]) -> None: ...
        async def _physical_abort(self, runs: list[RunState]) -> str | None: ...
        async def abort(self, request_ids: list[str], reason: str = "abort") -> AbortResult: ...

    # ------------------------------------------------------------------------------------------
    # graph
    # ------------------------------------------------------------------------------------------
    def _init_routing(self) -> None:
        self.graph = graph = StageGraph(self.pipeline)
        self.order = graph.order
        self.downstream = graph.downstream
        self.inputs = graph.inputs
        self.fan_in = graph.fan_in
        self.stream_sources = graph.stream_sources
        self.stage_info = graph.stage_info
        self.plan = graph.plan
        self.plan_until = graph.plan_until

    def new_run(
        self,
        run_id: str,
        parent: ParentState,
        index: int,
        prompt: Any,
        params: dict[int, SamplingParams],
        needed: frozenset[int],
        finals: tuple[int, ...],
    ) -> RunState:
        stages = {
            sid: StageRun(StageResult(stage_id=sid, stage_name=self.pipeline.stages[sid].name))
            for sid in self.order
            if sid in needed
        }
        return RunState(run_id, parent, index, prompt, params, needed, finals, stages)

    def register_run(self, run: RunState) -> None:
        self.runs[run.run_id] = run
        if run.visible:
            run.parent.live.add(run.run_id)
        self.hooks.request_admitted(run.run_id, self)

    async def start_run(self, run: RunState) -> None:
        """Submit a registered run to its entry stages (stages without inputs)."""
        for sid in self.order:
            if sid in run.needed and not self.inputs[sid] and not run.terminal:
                await self.submit(run, sid, run.prompt, streaming_input=False)

    # ------------------------------------------------------------------------------------------
    # submit
    # ------------------------------------------------------------------------------------------
    async def submit(
        self, run: RunState, stage_id: int, prompt: Any, streaming_input: bool
    ) -> None:
        pool = self.pools[stage_id]
        sr = run.stages[stage_id]
        prefer = None
        if run.companion_of is not None:  # companions follow their request's replica
            prefer = run.companion_of.stages[stage_id].replica
        replica = pool.pick(prefer)
        if replica is None:
            await self.fail_run(run, stage_id, unavailable(pool.stage.name))
            return
        client = pool.client(replica)
        assert client is not None
        request = StageRequest(
            request_id=run.run_id,
            prompt=prompt,
            params=run.params[stage_id],
            streaming_input=streaming_input,
            trace_context=run.tags.get("trace_context"),
            stream_outputs=stage_id in run.finals or stage_id in self.streamed_stages,
        )
        sr.replica, sr.submitted, sr.t_submit = replica, True, time.monotonic()
        pool.bound[replica].add(run.run_id)
        try:
            await client.add_request(request)
        except EngineDeadError as exc:
            pool.bound[replica].discard(run.run_id)
            await self._on_replica_dead(pool, replica, exc)
            if not run.terminal:
                await self.fail_run(run, stage_id, unavailable(pool.stage.name))
            return
        except Exception as exc:
            pool.bound[replica].discard(run.run_id)
            sr.submitted = False
            if not await self._handle_forward_failure(run, stage_id, exc):
                await self.fail_run(run, stage_id, ErrorInfo.from_exception(exc, status_code=400))
            return
        self._on_stage_submitted(run, stage_id, replica)

    # ------------------------------------------------------------------------------------------
    # outputs
    # ------------------------------------------------------------------------------------------
    async def _on_stage_outputs(
        self, stage_id: int, replica: int, outputs: list[StageOutput]
    ) -> None:
        observe = self.hooks.has_output_observers
        for out in outputs:
            run = self.runs.get(out.request_id)
            if run is None or run.terminal:
                continue  # late output of a terminal or unknown request: dropped
            sr = run.stages.get(stage_id)
            if sr is None or sr.finished or sr.replica != replica:
                continue
            if observe:
                self.hooks.stage_output(run.run_id, stage_id, out, self)
            if out.error is not None:
                await self.fail_run(run, stage_id, out.error)
                continue
            if self._record(run, sr, stage_id, out):
                await self._advance(run, stage_id, out)

    async def route(self, run: RunState, stage_id: int, out: StageOutput) -> None:
        """Record one stage output, emit it if final, forward it, converge the terminal."""
        if self._record(run, run.stages[stage_id], stage_id, out):
            await self._advance(run, stage_id, out)

    def _record(self, run: RunState, sr: StageRun, stage_id: int, out: StageOutput) -> bool:
        """The synchronous part of routing (every token takes it): record and emit.

        Returns True when the output may forward or finish something (``_advance`` must run).
        """
        sr.result.add(out)
        if not sr.t_first:
            sr.t_first = time.monotonic()
        if out.finished:
            sr.finished = True
            sr.t_finish = time.monotonic()
            if sr.replica is not None:
                self.pools[stage_id].bound[sr.replica].discard(run.run_id)
        if self._intercept_stage_output(run, stage_id, out):
            return False
        if stage_id in run.finals:
            completes = False
            if out.finished:
                run.finished_finals.add(stage_id)
                completes = len(run.finished_finals) == len(run.finals)
            if run.visible:
                self._emit_stage_output(run, stage_id, out, completes)
        return out.finished or stage_id in self.stream_sources

    async def _advance(self, run: RunState, stage_id: int, out: StageOutput) -> None:
        for target, edge in self.downstream[stage_id]:
            if target in run.needed and not run.terminal:
                await self._feed(run, stage_id, target, edge, out)
        if (
            out.finished
            and not run.terminal
            and stage_id in run.finals
            and len(run.finished_finals) == len(run.finals)
        ):
            self._terminate_run(run, out.finish_reason or "stop", None)

    def _emit_stage_output(
        self, run: RunState, stage_id: int, out: StageOutput, completes: bool
    ) -> None:
        name, output_type = self.stage_info[stage_id]
        last = completes and len(run.parent.live) == 1 and run.run_id in run.parent.live
        self.emitter.emit(
            run.parent.stream,
            OmniRequestOutput(
                request_id=run.parent.request_id,
                index=run.index,
                stage_id=stage_id,
                stage_name=name,
                output_type=output_type,
                finished=last,
                finish_reason=out.finish_reason if out.finished else None,
                text=out.text,
                token_ids=out.token_ids,
                payload=out.payload,
                logprobs=out.logprobs,
                metrics=self._metrics(run) if last else {},
                hidden_states=out.hidden_states,
            ),
        )

    def _metrics(self, run: RunState) -> dict[str, float]:
        """Per-stage timings (ms) of a run: time to first output and total, from submit."""
        metrics: dict[str, float] = {}
        for sid, sr in run.stages.items():
            if sr.t_submit and sr.t_first:
                name = self.pipeline.stages[sid].name
                metrics[f"{name}.first_output_ms"] = (sr.t_first - sr.t_submit) * 1e3
                if sr.t_finish:
                    metrics[f"{name}.total_ms"] = (sr.t_finish - sr.t_submit) * 1e3
        return metrics

    async def _feed(
        self,
        run: RunState,
        source: int,
        target: int,
        edge: InputEdge,
        out: StageOutput,
    ) -> None:
        tr = run.stages[target]
        if tr.finished:
            return
        if edge.mode == "on_finish":
            if out.finished:
                stages = run.stages
                for sid in self.fan_in[target]:
                    if not stages[sid].finished:
                        return
                await self.forward(run, target)
            return
        # stream edge: open the downstream request at the first chunk, feed the rest as it comes
        if tr.stream_buffer is None:
            tr.stream_buffer = StageResult(
                stage_id=source, stage_name=self.pipeline.stages[source].name
            )
        tr.stream_buffer.add(out)
        tr.stream_count += 1
        if tr.deferred or (tr.stream_count < edge.chunk and not out.finished):
            return  # a held stream keeps buffering until release_forward
        await self._send_stream(run, target, out.finished)

    async def _send_stream(self, run: RunState, target: int, upstream_done: bool) -> None:
        """Bridge what a stream edge buffered for ``target``: open its request (once the forward
        gates let it; their transforms then apply to every chunk) or feed it as more input."""
        tr = run.stages[target]
        if tr.stream_buffer is None:
            return
        sources: list[Any] = [tr.stream_buffer]
        verdict = run.stream_gates.get(target) if run.stream_gates else None
        if not tr.submitted:
            verdict = ask_gates(self.hooks, run.run_id, target, self)
            if verdict is None:
                tr.deferred = True
                return
            tr.deferred = False
            sources.extend(verdict.extra_sources)
            if verdict.transforms:
                run.stream_gates = {**(run.stream_gates or {}), target: verdict}
        stage = self.pipeline.stages[target]
        try:
            chunk = stage.bridge(sources, run.prompt, run.params[target])
            if chunk is not None and verdict is not None:
                chunk = verdict.apply(chunk)
        except Exception as exc:
            if not await self._handle_forward_failure(run, target, exc):
                await self.fail_run(run, target, ErrorInfo.from_exception(exc, status_code=400))
            return
        if chunk is None and not upstream_done:
            return
        tr.stream_buffer, tr.stream_count = None, 0
        if not tr.submitted:
            if chunk is None:
                await self._skip_stage(run, target)
            else:
                await self.submit(run, target, chunk, streaming_input=not upstream_done)
            return
        client = self.pools[target].client(tr.replica) if tr.replica is not None else None
        if client is None:
            return  # replica died: its death handler fails this request
        try:
            await client.add_input(run.run_id, chunk if chunk is not None else [], upstream_done)
        except EngineDeadError:
            return  # its reader reports the death and fails the bound requests
        except Exception as exc:
            if not await self._handle_forward_failure(run, target, exc):
                await self.fail_run(run, target, ErrorInfo.from_exception(exc, status_code=400))

    async def forward(self, run: RunState, target: int) -> None:
        """Forward a run to ``target`` once all its inputs finished (``on_finish`` edges)."""
        tr = run.stages[target]
        if tr.submitted or tr.finished or run.terminal:
            return
        verdict = ask_gates(self.hooks, run.run_id, target, self)
        if verdict is None:
            tr.deferred = True
            return
        tr.deferred = False
        sources: list[Any] = [run.stages[sid].result for sid in self.fan_in[target]]
        sources.extend(verdict.extra_sources)
        stage = self.pipeline.stages[target]
        try:
            prompt = verdict.apply(stage.bridge(sources, run.prompt, run.params[target]))
        except Exception as exc:
            if not await self._handle_forward_failure(run, target, exc):
                await self.fail_run(run, target, ErrorInfo.from_exception(exc, status_code=400))
            return
        if prompt is None or (isinstance(prompt, (list, str)) and not prompt):
            await self._skip_stage(run, target)
            return
        await self.submit(run, target, prompt, streaming_input=False)

    def release_forward(self, request_id: str, stage_id: int) -> None:
        """Let a forward deferred by ``omni_forward_gate`` happen (on the orchestrator loop)."""
        run = self.runs.get(request_id)
        if run is None or run.terminal or not run.stages[stage_id].deferred:
            return
        self.spawn(self._release(run, stage_id))

    async def _release(self, run: RunState, stage_id: int) -> None:
        if run.terminal or not run.stages[stage_id].deferred:
            return
        streams = [e.stage for e in self.inputs[stage_id] if e.mode == "stream"]
        if streams:
            done = all(run.stages[sid].finished for sid in streams)
            await self._send_stream(run, stage_id, done)
        else:
            await self.forward(run, stage_id)
        self.emitter.flush()

    async def _skip_stage(self, run: RunState, stage_id: int) -> None:
        """A stage got no usable input: it finishes empty (a synthetic empty terminal if final)."""
        run.stages[stage_id].submitted = True
        await self.route(
            run, stage_id, StageOutput(request_id=run.run_id, finished=True, finish_reason="stop")
        )

    # ------------------------------------------------------------------------------------------
    # terminals
    # ------------------------------------------------------------------------------------------
    async def fail_run(self, run: RunState, stage_id: int, error: ErrorInfo) -> None:
        """Request-scoped failure: the whole request (all its runs) gets one error terminal."""
        owner = run.companion_of or run
        if owner.terminal:
            return
        parent = owner.parent
        victims: dict[str, RunState] = {}
        for run_id in sorted(parent.live):
            self._collect_runs(self.runs[run_id], victims)
        await self._physical_abort(list(victims.values()))
        if not parent.live:
            return  # it reached its terminal (finished, aborted, failed) while the abort ran
        stage = self.pipeline.stages[stage_id]
        for victim in victims.values():
            if not victim.terminal:
                self._terminate_run(victim, "error", error)
        self.emitter.emit(
            parent.stream,
            OmniRequestOutput(
                request_id=parent.request_id,
                index=owner.index,
                stage_id=stage_id,
                stage_name=stage.name,
                output_type=stage.config.final_output_type,
                finished=True,
                finish_reason="error",
                error=error,
            ),
        )

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

    def _terminate_run(self, run: RunState, finish_reason: str, error: ErrorInfo | None) -> None:
        """The one place a run becomes terminal: tables, bindings, companions, parent, hooks.

        Every stage still working on the run (an upstream stream source of a final stage that
        ended first, a companion's stages) is aborted at its replica. The abort is started before
        the terminal is handed to the caller (the task's first step runs before the emitter's
        flush), so a caller reusing the id at once is not hit by it.
        """
        if run.terminal:
            return
        run.terminal = True
        self.runs.pop(run.run_id, None)
        for sid, sr in run.stages.items():
            if sr.replica is not None:
                self.pools[sid].bound[sr.replica].discard(run.run_id)
        if not self._stop.is_set() and _still_working(run):
            self.spawn(self._abort_quietly(run))
        ended = [run.run_id]
        for companion in run.companions:
            if not companion.terminal:
                self._terminate_run(companion, finish_reason, error)
        parent = run.parent
        if run.visible:
            parent.live.discard(run.run_id)
            if not parent.live:
                if self.parents.get(parent.request_id) is parent:
                    del self.parents[parent.request_id]
                if parent.deadline is not None:
                    parent.deadline.cancel()
        self._cleanup_request_ids(ended, finish_reason, error)

    async def _abort_quietly(self, run: RunState) -> None:
        error = await self._physical_abort([run])
        if error:
            logger.warning("abort of terminal run %s failed: %s", run.run_id, error)

    def _on_deadline(self, request_id: str) -> None:
        if request_id in self.parents:
            self.spawn(self._expire(request_id))

    async def _expire(self, request_id: str) -> None:
        result = await self.abort([request_id], reason="timeout")
        if not result.success:
            logger.warning("deadline abort of %s failed: %s", request_id, result.error)
        self.emitter.flush()


def _still_working(run: RunState) -> bool:
    """Whether a stage replica may still be producing for ``run``."""
    return any(s.submitted and not s.finished and not s.aborted for s in run.stages.values())


def unavailable(stage_name: str) -> ErrorInfo:
    """The error of a request that needs a stage without a live replica (503, retryable)."""
    return ErrorInfo.from_exception(
        StageUnavailableError(f"stage '{stage_name}' has no live replica")
    )
