"""``ReplicaSupervisor``: takes each replica's outputs (a reader task, or an intake for a client
that pushes), handles a replica's death (its requests fail, a restart policy may start it again)
and reports health."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from omni_core.errors import EngineDeadError, ReplicaDeadError
from omni_core.orchestrator.intake import ReplicaIntake
from omni_core.outputs import ErrorInfo
from omni_core.stage.client import PushingStageClient

if TYPE_CHECKING:
    from omni_core.orchestrator.context import PartContext
    from omni_core.orchestrator.terminals import Terminals
    from omni_core.outputs import StageOutput
    from omni_core.stage.client import StageClient
    from omni_core.stage.pool import StagePool

logger = logging.getLogger(__name__)

Route = Callable[[int, int, "list[StageOutput]"], Awaitable[None]]


class ReplicaSupervisor:
    """Owns the reader tasks (``readers``); the bindings a dead replica held are the table's."""

    def __init__(self, ctx: PartContext, terminals: Terminals) -> None:
        self.pools = ctx.pools
        self.table = ctx.table
        self.emitter = ctx.emitter
        self.tasks = ctx.tasks
        self.terminals = terminals
        self.stop = ctx.tasks.stop
        self.readers: dict[tuple[int, int], asyncio.Task[None]] = {}
        self.route: Route | None = None  # what the readers feed: given to start()

    def start(self, route: Route) -> None:
        """Start taking every live replica's outputs, handing each batch to ``route``."""
        self.route = route
        for pool in self.pools.values():
            for replica in pool.live():
                self.start_reader(pool, replica)

    def start_reader(self, pool: StagePool, replica: int) -> None:
        """Take a replica's outputs: through an intake if its client pushes, else a reader."""
        client = pool.client(replica)
        assert client is not None
        sid = pool.stage_id
        label = f"omni-reader-{sid}-{replica}"
        if isinstance(client, PushingStageClient):
            client.set_output_sink(
                ReplicaIntake(
                    lambda outputs: self._take_outputs(pool, sid, replica, client, outputs),
                    lambda error: self._take_death(pool, replica, client, error),
                    self.tasks.spawn,
                    self.tasks.fatal,
                    label,
                )
            )
            return
        self.readers[(sid, replica)] = self.tasks.loop.create_task(
            self._read_replica(pool, replica, client), name=label
        )

    async def _read_replica(self, pool: StagePool, replica: int, client: StageClient) -> None:
        sid = pool.stage_id
        try:
            while True:
                outputs = await client.get_outputs()
                await self._take_outputs(pool, sid, replica, client, outputs)
        except asyncio.CancelledError:
            raise
        except EngineDeadError as exc:
            await self._take_death(pool, replica, client, exc)
        except BaseException as exc:
            self.tasks.fatal(exc)

    async def _take_outputs(
        self,
        pool: StagePool,
        stage_id: int,
        replica: int,
        client: StageClient,
        outputs: list[StageOutput],
    ) -> None:
        """Route one batch of a replica's outputs (unless it was evicted or we are stopping)."""
        if pool.clients[replica] is not client or self.stop.is_set():
            return
        assert self.route is not None
        await self.route(stage_id, replica, outputs)
        self.emitter.flush_soon()  # once per loop turn, however many replicas' batches it routed

    async def _take_death(
        self, pool: StagePool, replica: int, client: StageClient, exc: EngineDeadError
    ) -> None:
        if pool.clients[replica] is not client or self.tasks.stop.is_set():
            return
        await self.died(pool, replica, exc)
        self.emitter.flush()

    async def died(self, pool: StagePool, replica: int, exc: BaseException) -> None:
        """A replica died: evict it, fail the requests it held, restart it if the policy says so."""
        client = pool.evict(replica)
        bound = self.table.evict(pool.stage_id, replica)
        self.readers.pop((pool.stage_id, replica), None)
        logger.warning(
            "stage '%s' replica %d died (%s); failing its %d request(s)",
            pool.stage.name,
            replica,
            exc,
            len(bound),
        )
        if client is not None:
            self.tasks.spawn(_quiet(client.shutdown()))
        error = ErrorInfo.from_exception(
            ReplicaDeadError(f"stage '{pool.stage.name}' replica {replica} died: {exc}")
        )
        for run_id in sorted(bound):
            run = self.table.runs.get(run_id)
            if run is not None:
                await self.terminals.fail(run, pool.stage_id, error)
        policy = pool.stage.config.restart
        if policy.policy == "on-failure" and pool.restarts < policy.max_restarts:
            pool.restarts += 1
            self.tasks.spawn(self._restart(pool, replica, policy.backoff_s))

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
        self.start_reader(pool, replica)

    def health(self) -> dict[str, Any]:
        return {
            pool.stage.name: {
                "stage_id": pool.stage_id,
                "replicas": [pool.healthy(i) for i in range(len(pool.clients))],
                "live": pool.has_live(),
                "restarts": pool.restarts,
                "pids": [getattr(c, "pid", None) for c in pool.clients],
                "errors": list(pool.errors),  # why a replica's last (re)start failed, or None
            }
            for pool in self.pools.values()
        }


async def _quiet(awaitable: Coroutine[Any, Any, Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("ignored error while closing a dead replica", exc_info=True)
