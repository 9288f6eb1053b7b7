"""``OrchestratorBase``: the orchestrator loop, built from parts with one job each.

Runs on the orchestrator thread. Every change to request state happens here, on one event loop.
The parts (docs/architecture.md, "The orchestrator's parts", draws them):

* ``graph`` — :class:`StageGraph`: stage order, edges, the stages a request needs;
* ``table`` — :class:`RequestTable`: requests and runs by id;
* ``emitter`` — :class:`Emitter`: outputs batched per caller loop;
* ``tasks`` — :class:`TaskSupervisor`: tasks, the stop signal, the crash;
* ``terminals`` — :class:`Terminals`: failure, abort, deadlines, the one terminal of each run;
* ``router`` — :class:`Router`: submit, route outputs along the graph, forward, emit finals;
* ``replicas`` — :class:`ReplicaSupervisor`: readers/intakes, replica death and restart, health;
* ``admissions`` — :class:`Admissions`: the admission of every ``AddRequest``;
* ``port`` — :class:`Port`: what hooks may do (:class:`omni_core.views.OrchestratorPort`).

Each part is built from one frozen :class:`~omni_core.orchestrator.context.PartContext` (plus
the parts it calls, built before it); every table has one owner (the request table owns runs,
requests and replica bindings). The base owns the request protocol: ``AddRequest`` (admitted by
:meth:`OrchestratorBase.admit`, which always fires the admission hooks), ``AbortRequest``,
``CollectiveRpc`` and ``Shutdown``; ``dispatch_message`` sees only the other messages.

Subclasses (the turn-based :class:`~omni_core.orchestrator.turn.Orchestrator`, an engine kind's
orchestrator) fill the **seams** below; seams fire no hooks, and the hooks fire from the parts'
own code whatever a subclass does: one mechanism per decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from omni_core.errors import RpcError, StageUnavailableError
from omni_core.messages import (
    AbortRequest,
    AddRequest,
    CollectiveRpc,
    EngineMessage,
    RpcCall,
    Shutdown,
)
from omni_core.orchestrator.admission import Admissions
from omni_core.orchestrator.context import Intercept, PartContext, Seams
from omni_core.orchestrator.control import collective_rpc
from omni_core.orchestrator.emit import Emitter
from omni_core.orchestrator.graph import Plan, StageGraph
from omni_core.orchestrator.port import Port
from omni_core.orchestrator.replicas import ReplicaSupervisor
from omni_core.orchestrator.routing import Router
from omni_core.orchestrator.state import ParentState, RunState
from omni_core.orchestrator.table import RequestTable
from omni_core.orchestrator.tasks import TaskSupervisor
from omni_core.orchestrator.terminals import Terminals
from omni_core.orchestrator.watchdog import LoopWatchdog

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.engine.channel import RequestInbox
    from omni_core.outputs import AbortResult, ErrorInfo, StageOutput
    from omni_core.plugin.hooks import PluginHost
    from omni_core.sampling import SamplingParams
    from omni_core.stage.pool import StagePool
    from omni_core.views import RequestView

logger = logging.getLogger(__name__)

Reply = Callable[[tuple[str, str], Any], None]


class OrchestratorBase:
    """The loop, the parts and the seams.

    Seams (override in a subclass; none fires a hook, so there is nothing to call ``super()``
    for): :meth:`dispatch_message` (messages other than the request protocol's),
    :meth:`background_tasks`, :meth:`shutdown_extensions`, :meth:`on_stage_submitted`,
    :meth:`intercept_stage_output`, :meth:`handle_forward_failure`, :meth:`on_runs_ended`.
    """

    def __init__(
        self,
        *,
        pipeline: ResolvedPipeline,
        pools: dict[int, StagePool],
        inbox: RequestInbox,
        hooks: PluginHost,
        reply: Reply,
        settings: Any,
    ) -> None:
        self.pipeline = pipeline
        self.pools = pools
        self.inbox = inbox
        self.hooks = hooks
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.graph = graph = StageGraph(pipeline)
        self.table = RequestTable(graph, {sid: len(p.clients) for sid, p in pools.items()})
        self.emitter = Emitter(self.loop)
        self.tasks = TaskSupervisor(self.loop)
        self.port = Port(self)
        hooks.open_pipeline(self.port)  # per-pipeline plugin objects, before parts read the hooks
        self._reply = reply
        intercept = self._interceptor()
        # Stages whose every delta someone reads even when they are not a run's final stage:
        # sources of stream edges; all stages when a plugin or a subclass looks at outputs.
        watched = hooks.has_output_observers or intercept is not None
        self.context = ctx = PartContext(
            pipeline=pipeline,
            pools=pools,
            graph=graph,
            table=self.table,
            emitter=self.emitter,
            tasks=self.tasks,
            hooks=hooks,
            port=self.port,
            settings=settings,
            seams=Seams(
                intercept=intercept,
                submitted=self._seam("on_stage_submitted"),
                forward_failure=self.handle_forward_failure,
                runs_ended=self._seam("on_runs_ended"),
                streamed_stages=frozenset(graph.order) if watched else graph.stream_sources,
            ),
        )
        # each part after the parts it calls: no cycle, nothing patched in afterwards
        self.terminals = Terminals(ctx)
        self.replicas = ReplicaSupervisor(ctx, self.terminals)
        self.router = Router(ctx, self.terminals, self.replicas)
        self.admissions = Admissions(ctx, self.terminals, self.router)
        # the loop-lag watchdog watches while a request is in flight (idle, it sleeps)
        lag = getattr(settings, "loop_lag_warn_s", 0)
        self._watchdog = LoopWatchdog(self.loop, lag, busy=self._busy) if lag else None

    def _busy(self) -> bool:
        return bool(self.table.parents or self.table.runs)

    def _seam(self, seam: str) -> Any:
        """The bound seam if the subclass overrides it, else None (no call per event)."""
        return getattr(self, seam) if self._overrides(seam) else None

    def _overrides(self, seam: str) -> bool:
        """Whether the subclass overrides a seam (a seam left as is costs no call per event)."""
        return getattr(type(self), seam) is not getattr(OrchestratorBase, seam)

    def _interceptor(self) -> Intercept | None:
        """Who may consume a stage output: the plugins (asked first), then the subclass's seam."""
        seam = self.intercept_stage_output if self._overrides("intercept_stage_output") else None
        if not self.hooks.has_output_interceptors:
            return seam
        hooks, port = self.hooks, self.port

        def by_plugins(run: RunState, stage_id: int, output: StageOutput) -> bool:
            return hooks.intercept_stage_output(run.run_id, run, stage_id, output, port)

        if seam is None:
            return by_plugins
        return lambda run, sid, out: by_plugins(run, sid, out) or seam(run, sid, out)

    # ------------------------------------------------------------------------------------------
    # read access (the engine's health and table sizes; tests)
    # ------------------------------------------------------------------------------------------
    @property
    def runs(self) -> dict[str, RunState]:
        return self.table.runs

    @property
    def parents(self) -> dict[str, ParentState]:
        return self.table.parents

    def health(self) -> dict[str, Any]:
        return self.replicas.health()

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until a Shutdown message or a crash; then stop extensions (stages stay up)."""
        tasks = self.tasks
        watchdog = self._watchdog
        if watchdog is not None:
            watchdog.start()
        self.replicas.start(self.router.on_outputs)
        tasks.spawn(self._request_handler(), name="omni-request-handler")
        for factory in [*self.background_tasks(), *self.hooks.background_tasks(self.port)]:
            tasks.spawn(_as_coroutine(factory()), name="omni-background")
        try:
            await tasks.stop.wait()
        finally:
            await tasks.cancel_all(*self.replicas.readers.values())
            for run in list(self.table.runs.values()):  # callers get EngineDeadError
                self.terminals.terminate(run, "shutdown", None)
            await self._stop_extensions()
            self.emitter.flush()
            if watchdog is not None:
                watchdog.stop()
        if tasks.crash is not None:
            raise tasks.crash

    async def _stop_extensions(self) -> None:
        """The subclass's seam, then every plugin's ``omni_shutdown``, each bounded."""
        factories: list[Callable[[], Awaitable[None]]] = [self.shutdown_extensions]
        factories.extend(self.hooks.shutdown_extensions(self.port))
        for factory in factories:
            try:
                await asyncio.wait_for(factory(), timeout=self.settings.shutdown_timeout_s)
            except Exception:
                logger.exception("a shutdown extension failed")

    async def _request_handler(self) -> None:
        while True:
            batch = await self.inbox.get_batch()
            self._watch()
            for msg in batch:
                if isinstance(msg, Shutdown):
                    self.tasks.stop.set()
                    return
                await self._handle_message(msg)
            self.emitter.flush()

    async def _handle_message(self, msg: EngineMessage) -> None:
        """The request protocol, owned here; other messages go to ``dispatch_message``."""
        if isinstance(msg, AddRequest):
            await self.admit(msg)
        elif isinstance(msg, AbortRequest):
            result = await self.abort(msg.request_ids, reason=msg.reason)
            if msg.rpc_key is not None:
                self.reply(msg.rpc_key, result)
            elif not result.success:
                logger.warning("abort of %s failed: %s", msg.request_ids, result.error)
        elif isinstance(msg, CollectiveRpc):
            self.spawn(self._collective_rpc(msg), name=f"omni-rpc-{msg.call.method}")
        elif not await self.dispatch_message(msg):
            logger.warning("orchestrator ignored unknown message %s", type(msg).__name__)

    # ------------------------------------------------------------------------------------------
    # seams (fire no hooks)
    # ------------------------------------------------------------------------------------------
    async def dispatch_message(self, msg: EngineMessage) -> bool:
        """Handle a message the base does not know (not ``AddRequest``, ``AbortRequest``,
        ``CollectiveRpc`` or ``Shutdown``: those are the base's); return True if handled."""
        return False

    def background_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        """Coroutine factories run while the orchestrator lives (the plugins' run as well)."""
        return []

    async def shutdown_extensions(self) -> None:
        """Awaited when the orchestrator stops, before the plugins' ``omni_shutdown``."""

    def on_stage_submitted(self, run: RequestView, stage_id: int, replica: int) -> None:
        """After every successful submit of a run to a stage replica (before the hook)."""

    def intercept_stage_output(self, run: RequestView, stage_id: int, output: StageOutput) -> bool:
        """Return True to consume a stage output (not emitted, not forwarded). Asked after the
        plugins' ``omni_intercept_stage_output``; overriding it streams every stage's deltas."""
        return False

    async def handle_forward_failure(
        self, run: RequestView, stage_id: int, exc: BaseException
    ) -> bool:
        """A submit or forward to ``stage_id`` raised; return True if handled. Default: the
        request fails (400)."""
        return False

    def on_runs_ended(
        self, run_ids: list[str], finish_reason: str, error: ErrorInfo | None
    ) -> None:
        """Runs turned terminal (already out of the tables); ``omni_request_terminal`` follows."""

    # ------------------------------------------------------------------------------------------
    # what subclasses build requests with
    # ------------------------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run a coroutine on the orchestrator loop; an unexpected exception is fatal."""
        return self.tasks.spawn(coro, name)

    def reply(self, key: tuple[str, str], result: Any) -> None:
        """Answer a correlated call (``OmniEngineBase.call``) made with ``key``."""
        self._reply(key, result)

    def plan(self, modalities: list[str] | None) -> Plan:
        """(stages needed, final stages in order) for the wanted output modalities."""
        return self.graph.plan(modalities)

    async def admit(self, msg: AddRequest) -> None:
        """Admit a caller's request: id checks, live stages, ``n``, ``omni_admit_request``
        (companions), registration (``omni_request_admitted``), the deadline, the submit. The
        template of every ``AddRequest``: the hooks fire whatever the subclass overrides."""
        await self.admissions.admit(msg)
        self._watch()  # admission may await past the watchdog's idle beat: watch what it holds

    def register_run(self, run: RunState) -> None:
        """Hold a run (fires ``omni_request_admitted``)."""
        self.admissions.register(run)
        self._watch()  # a run a subclass opens from its own task, not an inbox batch

    def _watch(self) -> None:
        if self._watchdog is not None:
            self._watchdog.wake()

    async def start_run(self, run: RunState) -> None:
        """Submit a registered run to its entry stages (stages without inputs)."""
        await self.router.start(run)

    async def open_run(
        self,
        run_id: str,
        prompt: Any,
        params: dict[int, SamplingParams],
        stream: Any,
        *,
        modalities: list[str] | None = None,
        tags: dict[str, Any] | None = None,
    ) -> RequestView:
        """Register a run of its own request and submit it: its outputs go to ``stream`` (an
        object with ``loop`` and ``push(item)``). Raises :class:`StageUnavailableError` if a stage
        it needs has no live replica (then nothing is registered)."""
        needed, finals = self.graph.plan(modalities)
        for sid in sorted(needed):
            if not self.pools[sid].has_live():
                raise StageUnavailableError(
                    f"stage '{self.pools[sid].stage.name}' has no live replica"
                )
        run = self.table.new_run(
            run_id, ParentState(run_id, stream), 0, prompt, params, needed, finals
        )
        run.tags.update(tags or {})
        self.register_run(run)
        await self.router.start(run)
        return run

    async def fail_run(self, run: RunState, stage_id: int, error: ErrorInfo) -> None:
        """Request-scoped failure: the whole request (all its runs) gets one error terminal."""
        await self.terminals.fail(run, stage_id, error)

    async def abort(self, request_ids: list[str], reason: str = "abort") -> AbortResult:
        """Abort requests (parent ids, child ids or companion ids); unknown ids are ignored."""
        return await self.terminals.abort(request_ids, reason)

    def release_forward(self, run_id: str, stage_id: int) -> None:
        """Let a forward deferred by ``omni_forward_gate`` happen (on the orchestrator loop)."""
        self.router.release_forward(run_id, stage_id)

    # ------------------------------------------------------------------------------------------
    # control RPCs
    # ------------------------------------------------------------------------------------------
    async def _collective_rpc(self, msg: CollectiveRpc) -> None:
        try:
            result: Any = await self.collective_rpc(msg.call)
        except Exception as exc:
            result = exc if isinstance(exc, RpcError) else RpcError(f"{type(exc).__name__}: {exc}")
        self.reply(msg.rpc_key, result)

    async def collective_rpc(self, call: RpcCall) -> list[Any]:
        """Call ``call.method`` on every live replica of the addressed stages, in stage order."""
        order = [s.id for s in self.pipeline.config.stages]
        return await collective_rpc(self.pools, order, call)


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
