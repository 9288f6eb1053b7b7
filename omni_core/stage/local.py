"""Base for in-process stage replicas: an outbox drained by the orchestrator's reader."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput


class LocalStageClient:
    """Outputs are appended to an outbox; ``get_outputs`` waits on an event, takes them all.

    Subclasses call :meth:`_emit` for each output and :meth:`_die` when the replica dies, and may
    override :meth:`_on_taken` (called after every batch the orchestrator took).
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._outbox: list[StageOutput] = []
        self._ready: asyncio.Event | None = None
        self._dead: str | None = None
        self._closed = False

    async def start(self) -> None:
        self._ready = asyncio.Event()

    def _emit(self, output: StageOutput) -> None:
        self._outbox.append(output)
        assert self._ready is not None
        self._ready.set()

    def _die(self, reason: str) -> None:
        self._dead = reason
        if self._ready is not None:
            self._ready.set()

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"{self.label} is dead: {self._dead}")
        if self._closed:
            raise EngineDeadError(f"{self.label} is shut down")

    def _on_taken(self) -> None:
        """Called after the orchestrator took a batch."""

    async def get_outputs(self) -> list[StageOutput]:
        assert self._ready is not None, "start() was not awaited"
        while not self._outbox:
            self._check_alive()
            self._ready.clear()
            await self._ready.wait()
        batch, self._outbox = self._outbox, []
        self._on_taken()
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
            self._ready.set()
