"""``/v1/realtime``: the WebSocket transport, mounted by ``omni serve`` through the route hook.

Connect → a new session (``session.created`` first), or ``?session_id=…&generation=N`` to resume a
detached one. A reader turns client events into commands; a writer pumps session events out. A
disconnect detaches the session (``disconnect_grace_s`` to resume, then ``session.expired``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import WebSocket

from omni_duplex import realtime
from omni_duplex.client_events import ClientEventError, decode_frame
from omni_duplex.errors import DuplexError

logger = logging.getLogger(__name__)

INLINE_DECODE_BYTES = 64 * 1024  # larger frames are decoded in a worker thread


def mount(app: Any, engine: Any) -> None:
    """Add the route when the server's engine is a duplex engine (nothing otherwise)."""
    from omni_duplex.engine import DuplexOmniEngine

    if not isinstance(engine, DuplexOmniEngine):
        return

    @app.websocket("/v1/realtime")
    async def realtime_ws(websocket: WebSocket) -> None:
        await serve_socket(websocket, engine)


async def serve_socket(websocket: Any, engine: Any) -> None:
    """One connection; the server's gate already checked the API key (omni serve's --api-key)."""
    from starlette.websockets import WebSocketDisconnect

    await websocket.accept()
    query = websocket.query_params
    try:
        if query.get("session_id"):
            session = await engine.resume_session(
                query["session_id"], int(query.get("generation", "0"))
            )
        else:
            peer = getattr(websocket, "client", None)  # starlette's Address(host, port)
            session = await engine.open_session(client=getattr(peer, "host", None))
    except (DuplexError, ValueError) as exc:
        code = exc.code if isinstance(exc, DuplexError) else "invalid_argument"
        retry = exc.retryable if isinstance(exc, DuplexError) else False
        after = exc.retry_after_s if isinstance(exc, DuplexError) else None
        event = realtime.error_event(code, str(exc), None, retry, retry_after_s=after)
        await websocket.send_text(json.dumps(event))
        await websocket.close(code=1013 if retry else 1008)
        return

    async def writer() -> None:
        async for event in session.events():
            await websocket.send_text(json.dumps(realtime.to_server_event(event)))

    max_bytes = engine.duplex_config.max_event_bytes

    async def reply_error(exc: DuplexError, event_id: str | None) -> None:
        event = realtime.error_event(exc.code, exc.message, event_id, exc.retryable)
        await websocket.send_text(json.dumps(event))

    async def reader() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            frame = message.get("text")
            if frame is None:
                frame = message.get("bytes") or b""
            try:  # a malformed event gets one `error` event; the socket stays open
                if len(frame) > INLINE_DECODE_BYTES:  # JSON and base64 off the event loop
                    commands = await asyncio.to_thread(decode_frame, frame, max_bytes)
                else:
                    commands = decode_frame(frame, max_bytes)
            except ClientEventError as exc:
                await reply_error(exc, exc.event_id)
                continue
            for command in commands:
                try:
                    session.send(command)
                except DuplexError as exc:
                    await reply_error(exc, command.event_id)

    write = asyncio.ensure_future(writer())
    read = asyncio.ensure_future(reader())
    try:
        done, _ = await asyncio.wait({write, read}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        write.cancel()
        read.cancel()
        await asyncio.gather(write, read, return_exceptions=True)
    if write in done and write.exception() is None:  # the session ended: close the socket
        with contextlib.suppress(Exception):
            await websocket.close(code=1000)
        return
    if read in done and not isinstance(read.exception(), WebSocketDisconnect):
        logger.warning("duplex socket of %s failed: %r", session.id, read.exception())
    if not session.closed:  # the client went away: keep the session for a resume
        with contextlib.suppress(DuplexError):
            await session.detach()
