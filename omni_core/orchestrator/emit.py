"""Batches outputs per destination event loop: one thread hand-off per loop per wake-up."""

from __future__ import annotations

import asyncio
from typing import Any


def _deliver(items: list[tuple[Any, Any]]) -> None:
    for stream, item in items:
        stream.push(item)


class Emitter:
    def __init__(self) -> None:
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, list[tuple[Any, Any]]]] = {}

    def emit(self, stream: Any, item: Any) -> None:
        if stream is None:
            return
        entry = self._pending.get(id(stream.loop))
        if entry is None:
            entry = self._pending[id(stream.loop)] = (stream.loop, [])
        entry[1].append((stream, item))

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for loop, items in pending.values():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass
