"""``TaskSupervisor``: the orchestrator's tasks, its stop signal and its crash.

Every coroutine the orchestrator (or a plugin, through the port) runs on its loop is spawned
here; an exception escaping one is fatal: it is kept as the crash and the orchestrator stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)


class TaskSupervisor:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.stop = asyncio.Event()
        self.crash: BaseException | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run a coroutine on the orchestrator loop; an unexpected exception is fatal."""
        task = self.loop.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.fatal(task.exception())  # type: ignore[arg-type]

    def fatal(self, exc: BaseException) -> None:
        """Stop the orchestrator; the first crash is re-raised by its ``run()``."""
        if self.crash is None and not self.stop.is_set():
            logger.error("orchestrator crashed", exc_info=exc)
            self.crash = exc
        self.stop.set()

    async def cancel_all(self, *others: asyncio.Task[Any]) -> None:
        """Cancel every task (and ``others``) and wait until they ended."""
        tasks = [*self.tasks, *others]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
