"""Base for in-process stage replicas: an outbox handed to the orchestrator once per loop turn."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput

if TYPE_CHECKING:
    from omni_core.stage.client import OutputSink


class LocalStageClient:
    """Outputs are appended to an outbox and handed over together.

    With an output sink (the orchestrator sets one: :class:`~omni_core.stage.client.
    PushingStageClient`) the outbox is pushed from a ``call_soon`` callback, once per loop turn
    however many outputs were emitted meanwhile; without one, ``get_outputs`` waits on an event
    and takes them all.

    Subclasses call :meth:`emit` for each output and :meth:`die` when the replica dies, and may
    override :meth:`on_taken` (called after every batch the orchestrator took). A subclass that
    runs its own loop callback (a socket reader) may fill ``_outbox`` and call :meth:`_hand_over`
    itself.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._outbox: list[StageOutput] = []
        self._ready: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: OutputSink | None = None
        self._scheduled = False
        self._reported = False
        self._dead: str | None = None
        self._closed = False

    async def start(self) -> None:
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def set_output_sink(self, sink: OutputSink) -> None:
        self._sink = sink
        if self._outbox or self._dead is not None or self._closed:
            self._schedule()

    def _schedule(self) -> None:
        if self._sink is None:
            assert self._ready is not None, "start() was not awaited"
            self._ready.set()
        elif not self._scheduled:
            self._scheduled = True
            assert self._loop is not None, "start() was not awaited"
            self._loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        """Push the outbox (and then a death) to the sink; without a sink, wake ``get_outputs``."""
        self._scheduled = False
        sink = self._sink
        if sink is None:
            if self._ready is not None:
                self._ready.set()
            return
        if self._outbox:
            batch, self._outbox = self._outbox, []
            sink.push(batch)
            self.on_taken()
        if (self._dead is not None or self._closed) and not self._reported:
            self._reported = True
            sink.dead(self._death())

    def emit(self, output: StageOutput) -> None:
        self._outbox.append(output)
        self._schedule()

    def die(self, reason: str) -> None:
        self._dead = reason
        if self._ready is not None:
            self._schedule()

    def _death(self) -> EngineDeadError:
        if self._dead is not None:
            return EngineDeadError(f"{self.label} is dead: {self._dead}")
        return EngineDeadError(f"{self.label} is shut down")

    def check_alive(self) -> None:
        if self._dead is not None or self._closed:
            raise self._death()

    def on_taken(self) -> None:
        """Called after the orchestrator took a batch."""

    async def get_outputs(self) -> list[StageOutput]:
        assert self._ready is not None, "start() was not awaited"
        while not self._outbox:
            self.check_alive()
            self._ready.clear()
            await self._ready.wait()
        batch, self._outbox = self._outbox, []
        self.on_taken()
        return batch

    def is_healthy(self) -> bool:
        return self._dead is None and not self._closed

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        raise NotImplementedError(f"{self.label} does not support RPC '{method}'")

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError(f"{self.label} does not accept streamed input")

    async def shutdown(self) -> None:
        self._closed = True
        if self._ready is not None:
            self._schedule()
