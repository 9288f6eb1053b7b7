"""``RpcRouter``: results of correlated calls (abort_async, control RPCs) matched to callers.

Keys are ``(namespace, id)``. A caller registers before it submits; the orchestrator delivers
from its thread; late results (nobody waiting) are dropped. A fatal error is broadcast to every
waiter and latched: later calls are refused without enqueuing anything. ``close`` unblocks all.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

from omni_core.errors import EngineDeadError, OmniError

logger = logging.getLogger(__name__)


class RpcRouter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, str], concurrent.futures.Future[Any]] = {}
        self._fatal: BaseException | None = None

    def register(self, key: tuple[str, str]) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._fatal is not None:
                raise EngineDeadError(f"the engine cannot take calls: {self._fatal}")
            if key in self._waiters:
                raise OmniError(f"RPC key {key} is already waiting")
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._waiters[key] = fut
            return fut

    def unregister(self, key: tuple[str, str], fut: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            if self._waiters.get(key) is fut:
                del self._waiters[key]

    def deliver(self, key: tuple[str, str], result: Any) -> None:
        """Called from the orchestrator thread. An exception result is raised in the caller."""
        with self._lock:
            fut = self._waiters.pop(key, None)
        if fut is None:
            logger.debug("dropped late RPC result for %s", key)
            return
        if fut.done():
            return
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    def fail_all(self, exc: BaseException) -> None:
        """Broadcast a fatal error to every waiter and latch it."""
        with self._lock:
            if self._fatal is None:
                self._fatal = exc
            waiters, self._waiters = self._waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(EngineDeadError(str(exc)))

    def close(self) -> None:
        self.fail_all(EngineDeadError("RPC router closed"))

    @property
    def pending(self) -> int:
        return len(self._waiters)
