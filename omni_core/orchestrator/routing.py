"""``Router``: submit runs to stages, route their outputs along the graph, emit finals in order.

Runs only on the orchestrator loop. Fires ``omni_stage_submitted``, ``omni_stage_output``,
``omni_intercept_stage_output`` and ``omni_forward_gate``; a subclass's seams
(``on_stage_submitted``, ``intercept_stage_output``, ``handle_forward_failure``) are called next to
them and cannot switch them off.
"""

from __future__ import annotations

import time
from time import monotonic
from typing import TYPE_CHECKING, Any

from omni_core.errors import EngineDeadError, StageUnavailableError
from omni_core.orchestrator.gates import ask_gates
from omni_core.outputs import ErrorInfo, OmniRequestOutput, StageOutput, StageResult
from omni_core.stage.client import StageRequest

if TYPE_CHECKING:
    from omni_core.config.pipeline import InputEdge
    from omni_core.orchestrator.context import PartContext
    from omni_core.orchestrator.replicas import ReplicaSupervisor
    from omni_core.orchestrator.state import RunState, StageRun
    from omni_core.orchestrator.terminals import Terminals


class Router:
    """Built from the context; asks ``terminals`` to fail or end runs and ``replicas`` to handle
    a replica found dead at submit. Replica bindings are the table's (``bind``/``unbind``)."""

    def __init__(self, ctx: PartContext, terminals: Terminals, replicas: ReplicaSupervisor) -> None:
        graph, seams = ctx.graph, ctx.seams
        self.pipeline = ctx.pipeline
        self.pools = ctx.pools
        self.graph = graph
        self.table = ctx.table
        self.runs = ctx.table.runs
        self.emitter = ctx.emitter
        self.tasks = ctx.tasks
        self.terminals = terminals
        self.replicas = replicas
        self.hooks = ctx.hooks
        self.port = ctx.port
        self.streamed_stages = seams.streamed_stages  # deltas read when not a run's final stage
        self.stream_sources = graph.stream_sources
        self.downstream = graph.downstream
        self.fan_in = graph.fan_in
        self.stage_info = graph.stage_info
        self.metric_keys = {  # stage id -> its two metric names (not formatted per request)
            sid: (f"{name}.first_output_ms", f"{name}.total_ms")
            for sid, name in graph.stage_names.items()
        }
        self.intercept = seams.intercept  # None: nobody intercepts (the common case costs nothing)
        self.submitted = seams.submitted  # the on_stage_submitted seam, None if not overridden
        self.forward_failure = seams.forward_failure

    # ------------------------------------------------------------------------------------------
    # submit
    # ------------------------------------------------------------------------------------------
    async def start(self, run: RunState) -> None:
        """Submit a registered run to its entry stages (stages without inputs)."""
        inputs = self.graph.inputs
        for sid in self.graph.order:
            if sid in run.needed and not inputs[sid] and not run.terminal:
                await self.submit(run, sid, run.prompt, streaming_input=False)

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
            await self.terminals.fail(run, stage_id, unavailable(pool.stage.name))
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
        table = self.table
        table.bind(stage_id, replica, run.run_id)
        try:
            await client.add_request(request)
        except EngineDeadError as exc:
            table.unbind(stage_id, replica, run.run_id)
            await self.replicas.died(pool, replica, exc)
            if not run.terminal:
                await self.terminals.fail(run, stage_id, unavailable(pool.stage.name))
            return
        except Exception as exc:
            table.unbind(stage_id, replica, run.run_id)
            sr.submitted = False
            await self._forward_failed(run, stage_id, exc)
            return
        if self.submitted is not None:
            self.submitted(run, stage_id, replica)
        self.hooks.stage_submitted(run.run_id, run, stage_id, replica, self.port)

    async def _forward_failed(self, run: RunState, stage_id: int, exc: BaseException) -> None:
        if not await self.forward_failure(run, stage_id, exc):
            await self.terminals.fail(run, stage_id, ErrorInfo.from_exception(exc, status_code=400))

    # ------------------------------------------------------------------------------------------
    # outputs
    # ------------------------------------------------------------------------------------------
    async def on_outputs(self, stage_id: int, replica: int, outputs: list[StageOutput]) -> None:
        """Route one batch of a replica's outputs (the per-token path).

        Records each output as :meth:`_record` does, inlined with what the batch shares bound
        once (``omni bench throughput``: the per-output call and attribute lookups were a fifth
        of the orchestrator's CPU per output; docs/benchmarks.md). A plain token delta (token
        ids and nothing else: what a streaming stage sends for every token but its last) takes a
        shorter path: its tokens are appended without :meth:`StageResult.add`, and on a final
        stage its caller's output is built here (what ``_emit_stage_output`` would build for it:
        ``tests/orchestrator/test_delta_path.py`` checks both paths give the same).
        """
        observe = self.hooks.has_output_observers
        get_run = self.runs.get
        intercept = self.intercept
        streams = stage_id in self.stream_sources
        unbind = self.table.unbind
        emit = self._emit_stage_output
        emit_delta = self.emitter.emit
        name, output_type = self.stage_info[stage_id]
        plain = intercept is None and not observe  # a delta may take the short path
        for out in outputs:
            run = get_run(out.request_id)
            if run is None or run.terminal:
                continue  # late output of a terminal or unknown request: dropped
            sr = run.stages.get(stage_id)
            if sr is None or sr.finished or sr.replica != replica:
                continue
            finished = out.finished
            if plain and not (
                finished
                or out.payload is not None
                or out.logprobs
                or out.hidden_states is not None
                or out.prompt_token_ids is not None
                or out.error is not None
            ):
                # a plain delta, nobody intercepting or observing: what StageResult.add does
                result = sr.result
                result.token_ids += out.token_ids
                if out.text:
                    result.text += out.text
                if not sr.t_first:
                    sr.t_first = monotonic()
                if stage_id in run.finals and run.companion_of is None:
                    parent = run.parent
                    emit_delta(
                        parent.stream,
                        OmniRequestOutput(
                            request_id=parent.request_id,
                            index=run.index,
                            stage_id=stage_id,
                            stage_name=name,
                            output_type=output_type,
                            text=out.text,
                            token_ids=out.token_ids,
                        ),
                    )
                if streams:
                    await self._advance(run, stage_id, out)
                continue
            if out.error is not None:
                if observe:
                    self.hooks.stage_output(run.run_id, run, stage_id, out, self.port)
                await self.terminals.fail(run, stage_id, out.error)
                continue
            # _record, inlined: record and emit
            sr.result.add(out)
            if not sr.t_first:
                sr.t_first = monotonic()
            if finished:
                sr.finished = True
                sr.t_finish = monotonic()
                unbind(stage_id, replica, run.run_id)
            if intercept is not None and intercept(run, stage_id, out):
                advance = False
            else:
                if stage_id in run.finals:
                    completes = False
                    if finished:
                        run.finished_finals.add(stage_id)
                        completes = len(run.finished_finals) == len(run.finals)
                    if run.companion_of is None:  # run.visible
                        emit(run, stage_id, out, completes)
                advance = finished or streams
            if observe:  # after the output is recorded (and emitted), before it forwards
                self.hooks.stage_output(run.run_id, run, stage_id, out, self.port)
            if advance:
                await self._advance(run, stage_id, out)

    async def route(self, run: RunState, stage_id: int, out: StageOutput) -> None:
        """Record one stage output, emit it if final, forward it, converge the terminal."""
        if self._record(run, run.stages[stage_id], stage_id, out):
            await self._advance(run, stage_id, out)

    def _record(self, run: RunState, sr: StageRun, stage_id: int, out: StageOutput) -> bool:
        """The synchronous part of routing (every token takes it): record and emit
        (:meth:`on_outputs` inlines it: a change here goes there too).

        Returns True when the output may forward or finish something (``_advance`` must run).
        """
        sr.result.add(out)
        if not sr.t_first:
            sr.t_first = time.monotonic()
        if out.finished:
            sr.finished = True
            sr.t_finish = time.monotonic()
            if sr.replica is not None:
                self.table.unbind(stage_id, sr.replica, run.run_id)
        intercept = self.intercept
        if intercept is not None and intercept(run, stage_id, out):
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
            self.terminals.terminate(run, out.finish_reason or "stop", None)

    def _emit_stage_output(
        self, run: RunState, stage_id: int, out: StageOutput, completes: bool
    ) -> None:
        name, output_type = self.stage_info[stage_id]
        parent = run.parent
        output = OmniRequestOutput(
            request_id=parent.request_id,
            index=run.index,
            stage_id=stage_id,
            stage_name=name,
            output_type=output_type,
            text=out.text,
            token_ids=out.token_ids,
        )
        # the fields a token delta leaves at their defaults are set only when they are not
        # (fewer keywords: ~0.2 µs less per streamed output, docs/benchmarks.md)
        if out.payload is not None:
            output.payload = out.payload
        if out.logprobs is not None:
            output.logprobs = out.logprobs
        if out.hidden_states is not None:
            output.hidden_states = out.hidden_states
        if out.finished:
            output.finish_reason = out.finish_reason
            if completes and len(parent.live) == 1 and run.run_id in parent.live:
                output.finished = True
                output.metrics = self._metrics(run)
        self.emitter.emit(parent.stream, output)

    def _metrics(self, run: RunState) -> dict[str, float]:
        """Per-stage timings (ms) of a run: time to first output and total, from submit."""
        metrics: dict[str, float] = {}
        keys = self.metric_keys
        for sid, sr in run.stages.items():
            if sr.t_submit and sr.t_first:
                first, total = keys[sid]
                metrics[first] = (sr.t_first - sr.t_submit) * 1e3
                if sr.t_finish:
                    metrics[total] = (sr.t_finish - sr.t_submit) * 1e3
        return metrics

    # ------------------------------------------------------------------------------------------
    # forwarding
    # ------------------------------------------------------------------------------------------
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
                stage_id=source, stage_name=self.graph.stage_names[source]
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
            verdict = ask_gates(self.hooks, run, target, self.port)
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
            await self._forward_failed(run, target, exc)
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
            await self._forward_failed(run, target, exc)

    async def forward(self, run: RunState, target: int) -> None:
        """Forward a run to ``target`` once all its inputs finished (``on_finish`` edges)."""
        tr = run.stages[target]
        if tr.submitted or tr.finished or run.terminal:
            return
        verdict = ask_gates(self.hooks, run, target, self.port)
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
            await self._forward_failed(run, target, exc)
            return
        if prompt is None or (isinstance(prompt, (list, str)) and not prompt):
            await self._skip_stage(run, target)
            return
        await self.submit(run, target, prompt, streaming_input=False)

    def release_forward(self, run_id: str, stage_id: int) -> None:
        """Let a forward deferred by ``omni_forward_gate`` happen (on the orchestrator loop)."""
        run = self.runs.get(run_id)
        if run is None or run.terminal or not run.stages[stage_id].deferred:
            return
        self.tasks.spawn(self._release(run, stage_id))

    async def _release(self, run: RunState, stage_id: int) -> None:
        if run.terminal or not run.stages[stage_id].deferred:
            return
        streams = [e.stage for e in self.graph.inputs[stage_id] if e.mode == "stream"]
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


def unavailable(stage_name: str) -> ErrorInfo:
    """The error of a request that needs a stage without a live replica (503, retryable)."""
    return ErrorInfo.from_exception(
        StageUnavailableError(f"stage '{stage_name}' has no live replica")
    )
