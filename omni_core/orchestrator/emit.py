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

_NONE = object()  # no last destination


def _deliver(items: list[tuple[Any, Any]]) -> None:
    for stream, item in items:
        stream.push(item)


class Emitter:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # destination loop -> what waits for it (loops hash by identity)
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any]]] = {}
        self._loop = loop
        self._flush_scheduled = False
        # the last destination's list: consecutive outputs mostly go to one caller loop
        self._last: object = _NONE
        self._last_items: list[tuple[Any, Any]] = []

    def emit(self, stream: Any, item: Any) -> None:
        if stream is None:
            return
        loop = stream.loop
        if loop is self._last:
            self._last_items.append((stream, item))
            return
        items = self._pending.get(loop)
        if items is None:
            items = self._pending[loop] = []
        self._last, self._last_items = loop, items
        items.append((stream, item))

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
        self._last = _NONE
        for loop, items in pending.items():
            try:
                hand_off(loop, _deliver, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass
