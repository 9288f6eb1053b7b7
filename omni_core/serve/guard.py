"""The server's one gate, in front of every route the core or a plugin mounts (HTTP and
WebSocket): the API key and the request-body limit.

An ASGI middleware rather than a per-route dependency, so a route a plugin adds cannot forget
it. ``open_paths`` answer without a key (``/health`` always, minimal unless the caller is
authorized; ``/metrics`` and ``/openapi.json`` with ``--public-metrics``); every other path
needs ``Authorization: Bearer KEY`` (compared in constant time). A WebSocket without the key is
refused before it is accepted (HTTP 403 to the handshake).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(Exception):
    """Raised by the guarded ``receive`` once a request body passes the limit (→ 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes")
        self.limit = limit


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
    ) -> None:
        self.app = app
        self.key = f"Bearer {api_key}".encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.open_paths = open_paths

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
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return counted


def _too_large(limit: int) -> tuple[int, bytes]:
    return _error(
        413,
        f"the request body is larger than the limit of {limit} bytes (OMNI_MAX_BODY_BYTES)",
        "invalid_request_error",
        "request_too_large",
    )


def too_large_body(exc: BodyTooLarge) -> tuple[int, bytes]:
    return _too_large(exc.limit)


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
