"""``OrchestratorBase``: the loop, the seams, request tables, routing and terminal convergence.

Runs on the orchestrator thread. Every change to request state happens here, on one event loop.
Subclasses decide what a message means (:meth:`_dispatch_message`) and may override the other
seams; plugin hooks fire from inside the seams' default implementations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from omni_core.errors import EngineDeadError, ReplicaDeadError, RpcError
from omni_core.messages import AbortRequest, CollectiveRpc, EngineMessage, Shutdown
from omni_core.orchestrator.emit import Emitter
from omni_core.orchestrator.intake import ReplicaIntake
from omni_core.orchestrator.routing import RoutingMixin
from omni_core.orchestrator.state import ParentState, RunState
from omni_core.outputs import AbortResult, ErrorInfo, StageOutput
from omni_core.stage.client import CONTROL_METHODS, PushingStageClient, StageClient

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.engine.channel import RequestInbox
    from omni_core.plugin.hooks import PluginHost
    from omni_core.stage.pool import StagePool

logger = logging.getLogger(__name__)

Reply = Callable[[tuple[str, str], Any], None]


class OrchestratorBase(RoutingMixin):
    """Owns the request handler, one reader (or intake) per replica, background tasks and shutdown.

    Seams (override in a subclass; call ``super()`` to keep plugin hooks firing):
    ``_dispatch_message``, ``_background_tasks``, ``_shutdown_extensions``, ``_on_stage_submitted``,
    ``_intercept_stage_output``, ``_handle_forward_failure``, ``_cleanup_request_ids``.
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
        self._reply = reply
        self.parents: dict[str, ParentState] = {}
        self.runs: dict[str, RunState] = {}
        self.loop = asyncio.get_running_loop()
        self.emitter = Emitter(self.loop)
        self._stop = asyncio.Event()
        self._crash: BaseException | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._readers: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._init_routing()
        # Stages whose every delta someone reads even when they are not a run's final stage:
        # sources of stream edges; all stages when a plugin or a subclass looks at outputs.
        watched = (
            hooks.has_output_observers
            or hooks.has_output_interceptors
            or type(self)._intercept_stage_output is not OrchestratorBase._intercept_stage_output
        )
        self.streamed_stages = frozenset(self.order) if watched else self.stream_sources

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until a Shutdown message or a crash; then stop extensions (stages stay up)."""
        for pool in self.pools.values():
            for replica in pool.live():
                self._start_reader(pool, replica)
        self.spawn(self._request_handler(), name="omni-request-handler")
        for factory in self._background_tasks():
            self.spawn(_as_coroutine(factory()), name="omni-background")
        try:
            await self._stop.wait()
        finally:
            for task in list(self._tasks) + list(self._readers.values()):
                task.cancel()
            await asyncio.gather(*self._tasks, *self._readers.values(), return_exceptions=True)
            for run in list(self.runs.values()):  # callers get EngineDeadError from the engine
                self._terminate_run(run, "shutdown", None)
            await self._shutdown_extensions()
            self.emitter.flush()
        if self._crash is not None:
            raise self._crash

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run a coroutine on the orchestrator loop; an unexpected exception is fatal."""
        task = self.loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._fatal(task.exception())  # type: ignore[arg-type]

    def _fatal(self, exc: BaseException) -> None:
        if self._crash is None and not self._stop.is_set():
            logger.error("orchestrator crashed", exc_info=exc)
            self._crash = exc
        self._stop.set()

    async def _request_handler(self) -> None:
        while True:
            batch = await self.inbox.get_batch()
            for msg in batch:
                if isinstance(msg, Shutdown):
                    self._stop.set()
                    return
                await self._handle_message(msg)
            self.emitter.flush()

    async def _handle_message(self, msg: EngineMessage) -> None:
        if await self._dispatch_message(msg):
            return
        if isinstance(msg, AbortRequest):
            result = await self.abort(msg.request_ids, reason=msg.reason)
            if msg.rpc_key is not None:
                self._reply(msg.rpc_key, result)
            elif not result.success:
                logger.warning("abort of %s failed: %s", msg.request_ids, result.error)
        elif isinstance(msg, CollectiveRpc):
            self.spawn(self._collective_rpc(msg), name=f"omni-rpc-{msg.method}")
        else:
            logger.warning("orchestrator ignored unknown message %s", type(msg).__name__)

    # ------------------------------------------------------------------------------------------
    # seams
    # ------------------------------------------------------------------------------------------
    async def _dispatch_message(self, msg: EngineMessage) -> bool:
        """Handle a message the base does not know; return True if handled."""
        return False

    def _background_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        """Coroutine factories run while the orchestrator lives (default: the plugins')."""
        return self.hooks.background_tasks(self)

    async def _shutdown_extensions(self) -> None:
        """Awaited when the orchestrator stops, before stages stop (default: the plugins')."""
        for factory in self.hooks.shutdown_extensions(self):
            try:
                await asyncio.wait_for(factory(), timeout=self.settings.shutdown_timeout_s)
            except Exception:
                logger.exception("a plugin shutdown extension failed")

    def _on_stage_submitted(self, run: RunState, stage_id: int, replica: int) -> None:
        """After every successful submit of a request to a stage replica."""
        self.hooks.stage_submitted(run.run_id, stage_id, replica, self)

    def _intercept_stage_output(self, run: RunState, stage_id: int, output: StageOutput) -> bool:
        """Return True to consume a stage output (not emitted, not forwarded)."""
        if self.hooks.has_output_interceptors:
            return self.hooks.intercept_stage_output(run.run_id, stage_id, output, self)
        return False

    async def _handle_forward_failure(
        self, run: RunState, stage_id: int, exc: BaseException
    ) -> bool:
        """A forward to ``stage_id`` raised; return True if handled. Default: fail the request."""
        return False

    def _cleanup_request_ids(
        self, run_ids: list[str], finish_reason: str, error: ErrorInfo | None
    ) -> None:
        """Drop the state of terminal runs (already removed from the tables) and notify."""
        for run_id in run_ids:
            self.hooks.request_terminal(run_id, finish_reason, error, self)

    # ------------------------------------------------------------------------------------------
    # replicas: readers, death, restart
    # ------------------------------------------------------------------------------------------
    def _start_reader(self, pool: StagePool, replica: int) -> None:
        """Take a replica's outputs: through an intake if its client pushes, else a reader."""
        client = pool.client(replica)
        assert client is not None
        label = f"omni-reader-{pool.stage_id}-{replica}"
        if isinstance(client, PushingStageClient):
            client.set_output_sink(
                ReplicaIntake(
                    lambda outputs: self._take_outputs(pool, replica, client, outputs),
                    lambda error: self._take_death(pool, replica, client, error),
                    self.spawn,
                    self._fatal,
                    label,
                )
            )
            return
        self._readers[(pool.stage_id, replica)] = self.loop.create_task(
            self._read_replica(pool, replica, client), name=label
        )

    async def _read_replica(self, pool: StagePool, replica: int, client: StageClient) -> None:
        try:
            while True:
                outputs = await client.get_outputs()
                await self._take_outputs(pool, replica, client, outputs)
        except asyncio.CancelledError:
            raise
        except EngineDeadError as exc:
            await self._take_death(pool, replica, client, exc)
        except BaseException as exc:
            self._fatal(exc)

    async def _take_outputs(
        self, pool: StagePool, replica: int, client: StageClient, outputs: list[StageOutput]
    ) -> None:
        """Route one batch of a replica's outputs (unless it was evicted or we are stopping)."""
        if pool.clients[replica] is not client or self._stop.is_set():
            return
        await self._on_stage_outputs(pool.stage.id, replica, outputs)
        self.emitter.flush_soon()  # once per loop turn, however many replicas' batches it routed

    async def _take_death(
        self, pool: StagePool, replica: int, client: StageClient, exc: EngineDeadError
    ) -> None:
        if pool.clients[replica] is not client or self._stop.is_set():
            return
        await self._on_replica_dead(pool, replica, exc)
        self.emitter.flush()

    async def _on_replica_dead(self, pool: StagePool, replica: int, exc: BaseException) -> None:
        client, bound = pool.evict(replica)
        self._readers.pop((pool.stage_id, replica), None)
        logger.warning(
            "stage '%s' replica %d died (%s); failing its %d request(s)",
            pool.stage.name,
            replica,
            exc,
            len(bound),
        )
        if client is not None:
            self.spawn(_quiet(client.shutdown()))
        error = ErrorInfo.from_exception(
            ReplicaDeadError(f"stage '{pool.stage.name}' replica {replica} died: {exc}")
        )
        for run_id in sorted(bound):
            run = self.runs.get(run_id)
            if run is not None:
                await self.fail_run(run, pool.stage_id, error)
        policy = pool.stage.config.restart
        if policy.policy == "on-failure" and pool.restarts < policy.max_restarts:
            pool.restarts += 1
            self.spawn(self._restart(pool, replica, policy.backoff_s))

    async def _restart(self, pool: StagePool, replica: int, backoff_s: float) -> None:
        if backoff_s:
            await asyncio.sleep(backoff_s)
        try:
            await pool.start_replica(replica)
        except Exception as exc:
            logger.error(
                "restart of stage '%s' replica %d failed: %s", pool.stage.name, replica, exc
            )
            return
        logger.warning(
            "stage '%s' replica %d restarted (%d/%d)",
            pool.stage.name,
            replica,
            pool.restarts,
            pool.stage.config.restart.max_restarts,
        )
        self._start_reader(pool, replica)

    def health(self) -> dict[str, Any]:
        return {
            pool.stage.name: {
                "stage_id": pool.stage_id,
                "replicas": [pool.healthy(i) for i in range(len(pool.clients))],
                "live": pool.has_live(),
                "restarts": pool.restarts,
                "pids": [getattr(c, "pid", None) for c in pool.clients],
            }
            for pool in self.pools.values()
        }

    # ------------------------------------------------------------------------------------------
    # control RPCs
    # ------------------------------------------------------------------------------------------
    async def _collective_rpc(self, msg: CollectiveRpc) -> None:
        try:
            result: Any = await self.collective_rpc(
                msg.method, msg.args, msg.kwargs, msg.stage_ids, msg.timeout
            )
        except Exception as exc:
            result = exc if isinstance(exc, RpcError) else RpcError(f"{type(exc).__name__}: {exc}")
        self._reply(msg.rpc_key, result)

    async def collective_rpc(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: list[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Call ``method`` on every live replica of the addressed stages, in stage order.

        Control methods raise :class:`RpcError` naming the replica when a worker fails; other
        methods answer ``{"supported": False, "error": ...}`` for that replica.
        """
        kwargs = kwargs or {}
        order = [s.id for s in self.pipeline.config.stages]
        if stage_ids is not None:
            unknown = [s for s in stage_ids if s not in self.pools]
            if unknown:
                raise RpcError(f"unknown stage id(s) {unknown} (pipeline stages: {order})")
            order = [s for s in order if s in stage_ids]
        results: list[Any] = []
        for sid in order:
            pool = self.pools[sid]
            for replica in pool.live():
                client = pool.client(replica)
                assert client is not None
                where = f"stage '{pool.stage.name}' (id {sid}) replica {replica}"
                try:
                    call = client.collective_rpc(method, tuple(args), kwargs)
                    value = await (asyncio.wait_for(call, timeout) if timeout else call)
                except Exception as exc:
                    if method in CONTROL_METHODS:
                        raise RpcError(
                            f"{method} failed on {where}: {type(exc).__name__}: {exc}"
                        ) from exc
                    if isinstance(exc, TimeoutError):
                        value = {
                            "supported": False,
                            "error": f"TimeoutError: {method} timed out after {timeout}s",
                        }
                    else:
                        value = {"supported": False, "error": f"{type(exc).__name__}: {exc}"}
                results.append(value)
        return results

    # ------------------------------------------------------------------------------------------
    # abort
    # ------------------------------------------------------------------------------------------
    async def abort(self, request_ids: list[str], reason: str = "abort") -> AbortResult:
        """Abort requests (parent ids, child ids or companion ids); unknown ids are ignored.

        The physical abort on every replica that holds a request happens first; only if all of
        them succeeded is the request's state dropped and its abort outputs emitted.
        """
        ids = list(request_ids)
        ids.extend(self.hooks.expand_abort(ids, self))
        runs: dict[str, RunState] = {}
        for rid in ids:
            parent = self.parents.get(rid)
            if parent is not None:
                for run_id in sorted(parent.live):
                    self._collect_runs(self.runs[run_id], runs)
            elif rid in self.runs:
                self._collect_runs(self.runs[rid], runs)
        if not runs:
            return AbortResult(success=True)
        error = await self._physical_abort(list(runs.values()))
        if error is not None:
            return AbortResult(success=False, error=error)
        outputs = []
        for run in runs.values():
            if run.terminal or not run.visible:
                continue
            outputs.extend(self._abort_outputs(run, reason))
            self._terminate_run(run, reason, None)
        for run in runs.values():  # companions of surviving parents
            if not run.terminal:
                self._terminate_run(run, reason, None)
        return AbortResult(success=True, outputs=outputs)

    def _collect_runs(self, run: RunState, into: dict[str, RunState]) -> None:
        into[run.run_id] = run
        for companion in run.companions:
            if not companion.terminal:
                into[companion.run_id] = companion

    async def _physical_abort(self, runs: list[RunState]) -> str | None:
        groups: dict[tuple[int, int], list[tuple[RunState, Any]]] = {}
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


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _quiet(awaitable: Coroutine[Any, Any, Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("ignored error while closing a dead replica", exc_info=True)
