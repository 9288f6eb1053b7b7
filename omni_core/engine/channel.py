"""Hand-offs between caller threads/loops and the orchestrator loop.

``RequestInbox``: bounded, many producers (any thread or loop) → the orchestrator loop. A producer
wakes the loop only when no wake-up is pending; the loop drains everything at each wake-up.
``RequestStream``: one request's outputs, delivered in batches into the caller's loop.
Every crossing into a loop goes through :func:`omni_core.stage.inbox.hand_off`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from omni_core.errors import EngineDeadError
from omni_core.stage.inbox import hand_off


class RequestInbox:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._wake_pending = False
        self._closed = False

    def bind(self) -> None:
        """Called on the orchestrator loop before it consumes."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        with self._lock:
            if self._items:
                self._wake_pending = True
                self._event.set()

    # --- producers ------------------------------------------------------------------------------
    def _append(self, item: Any) -> None:  # lock held
        self._items.append(item)
        if not self._wake_pending and self._loop is not None:
            self._wake_pending = True
            assert self._event is not None
            hand_off(self._loop, _set, self._event)

    def put_nowait(self, item: Any, force: bool = False) -> bool:
        """Enqueue if there is room (or ``force``); False when full. Raises if closed."""
        with self._lock:
            if self._closed:
                raise EngineDeadError("the engine is shut down")
            if not force and len(self._items) >= self.capacity:
                return False
            self._append(item)
            return True

    def put(self, item: Any, timeout: float | None = None) -> None:
        """Blocking put from a plain thread; waits for room (backpressure)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._closed and len(self._items) >= self.capacity:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("the engine's request queue is full")
                self._space.wait(remaining)
            if self._closed:
                raise EngineDeadError("the engine is shut down")
            self._append(item)

    async def put_async(self, item: Any) -> None:
        """Put from a coroutine; waits (without blocking the caller's loop) while full."""
        while not self.put_nowait(item):
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            with self._lock:
                if len(self._items) < self.capacity or self._closed:
                    continue
                self._async_waiters.append((loop, fut))
            await fut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake_space()

    # --- consumer (orchestrator loop) -----------------------------------------------------------
    async def get_batch(self) -> list[Any]:
        assert self._event is not None, "bind() was not called"
        while True:
            await self._event.wait()
            self._event.clear()
            with self._lock:
                self._wake_pending = False
                if self._items:
                    batch = list(self._items)
                    self._items.clear()
                    self._wake_space()
                    return batch

    def _wake_space(self) -> None:  # lock held
        self._space.notify_all()
        waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            try:
                hand_off(loop, _resolve, fut)
            except RuntimeError:
                pass

    def __len__(self) -> int:
        return len(self._items)


def _set(event: asyncio.Event) -> None:
    event.set()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class RequestStream:
    """One request's outputs in the caller's loop. ``push`` runs on that loop only."""

    __slots__ = ("items", "loop", "request_id", "waiter")

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self.loop = loop
        self.items: deque[Any] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def push(self, item: Any) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push_threadsafe(self, item: Any) -> None:
        try:
            hand_off(self.loop, self.push, item)
        except RuntimeError:
            pass

    async def wait(self) -> None:
        if not self.items:
            self.waiter = self.loop.create_future()
            await self.waiter
            self.waiter = None
