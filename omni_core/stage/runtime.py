"""``StageRuntime``: builds and starts every stage pool; releases them all at shutdown."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from omni_core.stage.client import StageContext
from omni_core.stage.pool import StagePool

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.config.settings import OmniSettings
    from omni_core.plugin.hooks import PluginHost

logger = logging.getLogger(__name__)


class StageRuntime:
    def __init__(
        self, pipeline: ResolvedPipeline, settings: OmniSettings, host: PluginHost
    ) -> None:
        context = StageContext.bound(pipeline.config.name, settings, host)
        self.backend: Any = None  # runtime "ray": hosts every replica on a Ray actor
        if pipeline.config.runtime == "ray":
            from omni_core.stage.ray_runtime import RayBackend

            self.backend = RayBackend(pipeline, settings)
        self.pools: dict[int, StagePool] = {
            sid: StagePool(
                stage, context, self.backend.client_factory(stage) if self.backend else None
            )
            for sid, stage in pipeline.stages.items()
        }
        self._released = False
        self.starting: str | None = None

    async def start(self) -> None:
        """Start every replica; on any failure stop the ones that started and re-raise."""
        try:
            if self.backend is not None:
                self.starting = "the Ray runtime"
                await self.backend.start()
            for pool in self.pools.values():
                for replica in range(len(pool.clients)):
                    self.starting = (
                        f"stage '{pool.stage.name}' (id {pool.stage_id}) replica {replica}"
                    )
                    await pool.start_replica(replica)
            self.starting = None
        except BaseException:
            await self.shutdown()
            raise

    async def shutdown(self) -> None:
        if self._released:
            return
        self._released = True
        clients = [c for pool in self.pools.values() for c in pool.clients if c is not None]
        for pool in self.pools.values():
            pool.clients = [None] * len(pool.clients)
        results = await asyncio.gather(*(c.shutdown() for c in clients), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.warning("stage client shutdown failed: %r", result)
        if self.backend is not None:
            await self.backend.shutdown()

    def kill_processes(self) -> None:
        """Last resort when the orchestrator thread is stuck: kill replica processes."""
        for pool in self.pools.values():
            for client in pool.clients:
                kill = getattr(client, "kill", None)
                if kill is not None:
                    try:
                        kill()
                    except Exception:  # pragma: no cover - best effort
                        pass
        if self.backend is not None:
            self.backend.kill()
