"""The server's one gate, in front of every route the core or a plugin mounts (HTTP and
WebSocket): the API key, the request-body limit and the HTTP read and write timeouts.

An ASGI middleware rather than a per-route dependency, so a route a plugin adds cannot forget
it. ``open_paths`` answer without a key (``/health`` always, minimal unless the caller is
authorized; ``/metrics`` and ``/openapi.json`` with ``--public-metrics``); every other path
needs ``Authorization: Bearer KEY`` (compared in constant time). A WebSocket without the key is
refused before it is accepted (HTTP 403 to the handshake).

``read_timeout_s``: a body not complete that long after its headers is a 408 (the connection
closed). ``write_timeout_s``: a response piece (an SSE event too) the client has not taken within
it drops the connection; the route unwinds (a streamed request is aborted, its in-flight slot
freed) and one WARNING says so.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from omni_core.serve.connections import abort

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    """Raised by the guarded ``receive`` once a request body passes the limit (→ 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes")
        self.limit = limit


class BodyTimeout(Exception):
    """Raised by the guarded ``receive`` once a request body is late (→ 408)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the request body did not arrive within {timeout_s:g} s")
        self.timeout_s = timeout_s


class ClientStalled(Exception):
    """Raised by the guarded ``send`` into the route once its client stopped reading."""


def _error(status: int, message: str, type_: str, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return status, json.dumps(body).encode()


class Guard:
    def __init__(
        self,
        app: App,
        *,
        api_key: str | None,
        max_body_bytes: int,
        open_paths: frozenset[str] = frozenset({"/health"}),
        read_timeout_s: float | None = None,
        write_timeout_s: float | None = None,
    ) -> None:
        self.app = app
        self.key = f"Bearer {api_key}".encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.open_paths = open_paths
        self.read_timeout_s = read_timeout_s
        self.write_timeout_s = write_timeout_s

    def authorized(self, scope: Scope) -> bool:
        if self.key is None:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(value, self.key)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ok = self.authorized(scope)
        scope.setdefault("state", {})["authorized"] = ok
        if not ok and scope["path"] not in self.open_paths:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await _respond(
                send,
                *_error(
                    401, "invalid or missing API key", "authentication_error", "invalid_api_key"
                ),
            )
            return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _respond(send, *_too_large(self.max_body_bytes))
            return
        try:
            await self.app(scope, self._counting(receive), self._timed(scope, send))
        except ClientStalled:
            await asyncio.sleep(0)  # the aborted connection's loss reaches the server first

    def _counting(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes
        timeout = self.read_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        complete = False

        async def counted() -> Message:
            nonlocal seen, complete
            if complete or deadline is None:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), deadline - time.monotonic())
                except TimeoutError:
                    assert timeout is not None
                    raise BodyTimeout(timeout) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
                complete = not message.get("more_body", False)
            return message

        return counted

    def _timed(self, scope: Scope, send: Send) -> Send:
        timeout = self.write_timeout_s
        if timeout is None:
            return send

        async def timed(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), timeout)
            except TimeoutError:
                client = scope.get("client")
                logger.warning(
                    "%s %s: the client at %s took no response data for %g s "
                    "(OMNI_WRITE_TIMEOUT_S): dropping the connection and its request",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    f"{client[0]}:{client[1]}" if client else "?",
                    timeout,
                )
                abort(scope)
                raise ClientStalled() from None

        return timed


def _too_large(limit: int) -> tuple[int, bytes]:
    return _error(
        413,
        f"the request body is larger than the limit of {limit} bytes (OMNI_MAX_BODY_BYTES)",
        "invalid_request_error",
        "request_too_large",
    )


def too_large_body(exc: BodyTooLarge) -> tuple[int, bytes]:
    return _too_large(exc.limit)


def late_body(exc: BodyTimeout) -> tuple[int, bytes]:
    return _error(
        408,
        f"the request body did not arrive within {exc.timeout_s:g} s of its headers "
        "(OMNI_READ_TIMEOUT_S)",
        "invalid_request_error",
        "request_timeout",
    )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
