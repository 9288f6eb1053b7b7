"""Connection-level edges of ``omni serve``: a deadline for a request's headers, a way for the
app to drop a connection, and the drain that ends streams cleanly when the grace period expires.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but not a client that opens a
connection and sends half a request line or half its headers: :func:`http_protocol` is uvicorn's
httptools protocol with a deadline from a request's first byte to its last header (past it: 408
and the connection closed). It also puts ``scope["extensions"]["omni.connection"]["abort"]`` in
each request's scope, which :func:`abort` calls to drop a client that stopped reading (an asyncio
transport's ``close`` would wait forever for that client to take the buffered bytes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

logger = logging.getLogger(__name__)

EXTENSION = "omni.connection"
_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 29\r\nconnection: close\r\n\r\nthe request headers timed out"
)


def http_protocol(header_timeout_s: float) -> type[Any]:
    """uvicorn's httptools protocol with a header deadline (``OMNI_READ_TIMEOUT_S``)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Protocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that never sends a whole request line is closed too

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.scope["extensions"] = {
                **self.scope.get("extensions", {}),
                EXTENSION: {"abort": self.transport.abort},
            }
            if self._deadline is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()  # idle between requests: uvicorn's keep-alive timeout applies

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                logger.info(
                    "closing a connection from %s: no complete request headers within %g s "
                    "(OMNI_READ_TIMEOUT_S)",
                    _peer(self.client),
                    header_timeout_s,
                )
                self.transport.write(_TIMEOUT_408)
                self.transport.close()

    return Protocol


def _peer(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def abort(scope: MutableMapping[str, Any]) -> bool:
    """Drop the request's connection now (True), where the server offers it (``http_protocol``)."""
    hook: Callable[[], None] | None = scope.get("extensions", {}).get(EXTENSION, {}).get("abort")
    if hook is None:
        return False
    hook()
    return True


class Drain:
    """The server's shutdown as streams see it: :meth:`begin` (on the loop, when uvicorn starts
    shutting down) arms a cut ``grace_s`` later; then :attr:`cut` is set and every stream still
    running ends with an error event and ``data: [DONE]`` (uvicorn itself cancels what is left a
    second later)."""

    def __init__(self) -> None:
        self.cut = asyncio.Event()
        self.grace_s = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def begin(self, grace_s: float) -> None:
        if self._timer is None and not self.cut.is_set():
            self.grace_s = grace_s
            self._timer = asyncio.get_running_loop().call_later(grace_s, self.cut.set)
