"""Batches outputs per destination event loop: one thread hand-off per loop per flush.

The hand-off is :func:`omni_core.stage.inbox.hand_off` (the caller loop's ``LoopInbox``).

``flush()`` hands everything emitted so far over now; ``flush_soon()`` does it once at the next
turn of the orchestrator loop, so that the batches of several replicas routed in the same turn
reach each caller loop in one hand-off (one wake-up of that loop, one syscall here).
"""

from __future__ import annotations

import asyncio
from typing import Any

from omni_core.stage.inbox import hand_off


def _deliver(items: list[tuple[Any, Any]]) -> None:
    for stream, item in items:
        stream.push(item)


class Emitter:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, list[tuple[Any, Any]]]] = {}
        self._loop = loop
        self._flush_scheduled = False

    def emit(self, stream: Any, item: Any) -> None:
        if stream is None:
            return
        entry = self._pending.get(id(stream.loop))
        if entry is None:
            entry = self._pending[id(stream.loop)] = (stream.loop, [])
        entry[1].append((stream, item))

    def flush_soon(self) -> None:
        """Flush at the next loop turn (at once without an orchestrator loop)."""
        if not self._pending or self._flush_scheduled:
            return
        if self._loop is None:
            self.flush()
            return
        self._flush_scheduled = True
        self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for loop, items in pending.values():
            try:
                hand_off(loop, _deliver, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass
