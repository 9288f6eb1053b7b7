"""``EngineRuntime``: the orchestrator thread and what callers share with it.

Kept apart from the engine object so the engine's GC finalizer can shut it down without holding
a reference to the engine.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omni_core.engine.channel import RequestInbox, RequestStream
from omni_core.engine.rpc import RpcRouter
from omni_core.errors import EngineDeadError, StartupError
from omni_core.messages import Shutdown
from omni_core.stage.runtime import StageRuntime

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.orchestrator.base import OrchestratorBase
    from omni_core.plugin.hooks import PluginHost

logger = logging.getLogger(__name__)

OrchestratorFactory = Callable[..., "OrchestratorBase"]


class EngineRuntime:
    def __init__(self, pipeline: ResolvedPipeline, settings: Any, hooks: PluginHost) -> None:
        self.pipeline = pipeline
        self.settings = settings
        # the orchestrator's hooks: only the plugins taking part in this pipeline
        self.hooks = hooks.for_pipeline(pipeline)
        self.inbox = RequestInbox(settings.request_queue_size)
        self.router = RpcRouter()
        self.streams: dict[str, RequestStream] = {}
        self.stages = StageRuntime(pipeline, settings, hooks)
        self.orchestrator: OrchestratorBase | None = None
        self.thread: threading.Thread | None = None
        self.dead_reason: str | None = None
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._closed = False
        self._lock = threading.Lock()

    # --- start ----------------------------------------------------------------------------------
    def start(self, create: OrchestratorFactory, timeout: float) -> None:
        """Start stages and the orchestrator on a new thread; raise StartupError on failure."""
        holder = [create]
        self.thread = threading.Thread(
            target=self._bootstrap, args=(holder,), name="omni-orchestrator", daemon=True
        )
        self.thread.start()
        if not self._started.wait(timeout):
            starting = self.stages.starting or "the orchestrator"
            self.shutdown(self.settings.shutdown_timeout_s)
            raise StartupError(
                f"{starting} did not start within {timeout:g}s (raise OMNI_STARTUP_TIMEOUT_S)"
            )
        if self._startup_error is not None:
            self.shutdown(self.settings.shutdown_timeout_s)
            err = self._startup_error
            if isinstance(err, StartupError):
                raise StartupError(str(err)) from err.__cause__
            raise StartupError(f"engine start-up failed: {type(err).__name__}: {err}") from err

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        if self.settings.uvloop:
            try:
                import uvloop
            except ImportError:
                logger.warning("OMNI_UVLOOP is set but uvloop is not installed; using asyncio")
            else:
                return uvloop.new_event_loop()  # type: ignore[no-any-return,unused-ignore]
        return asyncio.new_event_loop()

    def _bootstrap(self, holder: list[OrchestratorFactory]) -> None:
        loop = self._new_loop()
        asyncio.set_event_loop(loop)
        reason = "the engine is shut down"
        try:
            loop.run_until_complete(self._main(holder))
        except BaseException as exc:
            reason = f"the orchestrator died: {type(exc).__name__}: {exc}"
            logger.error("%s", reason, exc_info=exc)
        finally:
            self._started.set()
            self.hooks.close_pipeline()  # the pipeline's plugin objects leave with its engine
            try:  # the stage runtime is released only after the orchestrator stopped
                loop.run_until_complete(
                    asyncio.wait_for(self.stages.shutdown(), self.settings.shutdown_timeout_s)
                )
            except BaseException:
                logger.exception("stage runtime shutdown failed; killing replica processes")
                self.stages.kill_processes()
            self._mark_dead(reason)
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _main(self, holder: list[OrchestratorFactory]) -> None:
        self.inbox.bind()
        try:
            await self.stages.start()
            create = holder.pop()
            self.orchestrator = create(
                pipeline=self.pipeline,
                pools=self.stages.pools,
                inbox=self.inbox,
                hooks=self.hooks,
                reply=self.router.deliver,
                settings=self.settings,
            )
            del create  # a bound method of the engine: holding it would keep the engine alive
        except BaseException as exc:
            self._startup_error = exc
            self._started.set()
            return
        if "torch" in sys.modules or "vllm" in sys.modules:
            gc.freeze()  # a big, long-lived heap: keep the collector off it (as vLLM's server)
        if self.settings.gc_threshold is not None:
            gc.set_threshold(self.settings.gc_threshold, *gc.get_threshold()[1:])
        self._started.set()
        await self.orchestrator.run()

    # --- liveness -------------------------------------------------------------------------------
    def is_alive(self) -> bool:
        return self.dead_reason is None and self.thread is not None and self.thread.is_alive()

    def check_alive(self) -> None:
        if self.dead_reason is not None or self._closed:
            raise EngineDeadError(self.dead_reason or "the engine is shut down")

    def _mark_dead(self, reason: str) -> None:
        if self.dead_reason is None:
            self.dead_reason = reason
        error = EngineDeadError(reason)
        self.router.fail_all(error)
        self.inbox.close()
        for stream in list(self.streams.values()):
            stream.push_threadsafe(error)

    # --- shutdown -------------------------------------------------------------------------------
    def shutdown(self, timeout: float) -> None:
        """RPC router closed → orchestrator stopped and joined → stage runtime released.

        Idempotent and bounded by ``timeout`` even when the request queue is full.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.router.close()
        try:
            self.inbox.put_nowait(Shutdown(), force=True)
        except EngineDeadError:
            pass
        self.inbox.close()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.error("orchestrator did not stop within %.1fs; killing replicas", timeout)
                self.stages.kill_processes()
        self._mark_dead("the engine is shut down")
