"""``Port``: the :class:`~omni_core.views.OrchestratorPort` the orchestrator hands to hooks.

One per orchestrator. Each action looks the run up by id (an id no longer held is a no-op), does
what the orchestrator's own code does for it, and schedules the emitter's flush so that what the
action emitted reaches the callers at the next loop turn.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from omni_core.errors import PluginError
from omni_core.messages import RpcCall
from omni_core.outputs import AbortResult

if TYPE_CHECKING:
    import asyncio

    from omni_core.config.settings import OmniSettings
    from omni_core.orchestrator.base import OrchestratorBase
    from omni_core.outputs import ErrorInfo
    from omni_core.views import PipelineView, RequestView


class Port:
    """Implements :class:`omni_core.views.OrchestratorPort` over one orchestrator."""

    __slots__ = ("__weakref__", "_orchestrator", "loop", "pipeline")

    def __init__(self, orchestrator: OrchestratorBase) -> None:
        self._orchestrator = orchestrator
        self.pipeline: PipelineView = orchestrator.pipeline
        self.loop: asyncio.AbstractEventLoop = orchestrator.loop

    @property
    def settings(self) -> OmniSettings:
        return self._orchestrator.settings

    def request(self, run_id: str) -> RequestView | None:
        return self._orchestrator.table.runs.get(run_id)

    def has_live_replica(self, stage_id: int) -> bool:
        pool = self._orchestrator.pools.get(stage_id)
        return pool is not None and pool.has_live()

    async def submit(
        self, run_id: str, stage_id: int, prompt: Any, *, streaming_input: bool = False
    ) -> None:
        orchestrator = self._orchestrator
        run = orchestrator.table.runs.get(run_id)
        if run is None or run.terminal:
            return
        state = run.stages.get(stage_id)
        if state is None:
            raise PluginError(f"run '{run_id}' does not go through stage {stage_id}")
        if state.submitted:
            raise PluginError(f"run '{run_id}' was already submitted to stage {stage_id}")
        await orchestrator.router.submit(run, stage_id, prompt, streaming_input)
        orchestrator.emitter.flush_soon()

    async def forward(self, run_id: str, stage_id: int) -> None:
        orchestrator = self._orchestrator
        run = orchestrator.table.runs.get(run_id)
        if run is not None and stage_id in run.stages:
            await orchestrator.router.forward(run, stage_id)
            orchestrator.emitter.flush_soon()

    def release_forward(self, run_id: str, stage_id: int) -> None:
        self._orchestrator.router.release_forward(run_id, stage_id)

    async def fail(self, run_id: str, stage_id: int, error: ErrorInfo) -> None:
        orchestrator = self._orchestrator
        run = orchestrator.table.runs.get(run_id)
        if run is not None and not run.terminal:
            await orchestrator.terminals.fail(run, stage_id, error)
            orchestrator.emitter.flush_soon()

    async def abort(self, run_ids: Sequence[str], reason: str = "abort") -> AbortResult:
        orchestrator = self._orchestrator
        result = await orchestrator.terminals.abort(list(run_ids), reason)
        orchestrator.emitter.flush_soon()
        return result

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        return self._orchestrator.tasks.spawn(coro, name)

    def emit(self, stream: Any, item: Any) -> None:
        emitter = self._orchestrator.emitter
        emitter.emit(stream, item)
        emitter.flush_soon()

    async def collective_rpc(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: list[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        call = RpcCall(method, tuple(args), kwargs or {}, stage_ids, timeout)
        return await self._orchestrator.collective_rpc(call)
