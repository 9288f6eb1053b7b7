"""An in-process stand-in for starlette's ``WebSocket``: drives ``omni_duplex.server.serve_socket``
on the test's loop without uvicorn (fast enough for a property-based fuzz)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, NamedTuple

from starlette.websockets import WebSocketDisconnect

from omni_duplex.server import serve_socket


class _Address(NamedTuple):
    host: str
    port: int


class FakeSocket:
    def __init__(self, query: dict[str, str] | None = None, client: str | None = None) -> None:
        self.query_params = dict(query or {})
        # starlette's ``websocket.client`` (the peer's address); None as a test client has none
        self.client = None if client is None else _Address(client, 50_000)
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.close_code: int | None = None
        self.task: asyncio.Task[None] | None = None

    # --- what serve_socket calls (starlette's API) --------------------------------------------
    async def accept(self) -> None:
        pass

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def receive_text(self) -> str:  # as starlette: KeyError on a binary frame
        message = await self.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        return str(message["text"])

    async def send_text(self, text: str) -> None:
        self.sent.put_nowait(json.loads(text))

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.close_code = code

    # --- the client side ----------------------------------------------------------------------
    def start(self, engine: Any) -> FakeSocket:
        self.task = asyncio.ensure_future(serve_socket(self, engine))
        return self

    def send(self, event: Any) -> None:
        self.text(json.dumps(event))

    def text(self, frame: str) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": frame})

    def binary(self, frame: bytes) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "bytes": frame})

    def disconnect(self) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})

    @property
    def open(self) -> bool:
        return self.close_code is None and self.task is not None and not self.task.done()

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next server event; :class:`ConnectionError` at once if the server ended the
        connection and sent nothing more."""
        async with asyncio.timeout(timeout):
            get = asyncio.ensure_future(self.sent.get())
            try:
                ended = {self.task} if self.task is not None else set()
                await asyncio.wait({get, *ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                get.cancel()
            if get.done() and not get.cancelled():
                return get.result()
            if not self.sent.empty():
                return self.sent.get_nowait()
            raise ConnectionError(f"the server ended the connection (close code {self.close_code})")

    async def until(self, predicate: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Events up to and including the first that satisfies ``predicate``."""
        seen = []
        async with asyncio.timeout(timeout):
            while True:
                event = await self.recv(timeout)
                seen.append(event)
                if predicate(event):
                    return seen

    async def stop(self) -> None:
        self.disconnect()
        if self.task is not None:
            async with asyncio.timeout(10):
                await asyncio.gather(self.task, return_exceptions=True)
