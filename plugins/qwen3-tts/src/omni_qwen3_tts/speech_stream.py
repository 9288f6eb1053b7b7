"""``/v1/audio/speech/stream``: text in as it is written, speech out as it is decoded (a
WebSocket; the LLM-streamed-into-TTS shape of a voice agent).

The client sends JSON text frames:

* ``{"type": "session.config", ...}`` (optional, first): the fields of ``POST /v1/audio/speech``
  but ``input`` (``voice``, ``instructions``, ``language``, ``response_format`` ``pcm`` only,
  ``seed``, ``max_new_tokens``, ``ref_audio``);
* ``{"type": "input.text.delta", "delta": "..."}``, any number;
* ``{"type": "input.text.done"}``: the text is complete.

The text is cut into sentences as it arrives: after ``.``, ``!``, ``?`` or ``;`` followed by
whitespace, after a newline, or after a full-width CJK full stop, exclamation or question mark or
semicolon (no space needed); the rest once the text is done. Each complete sentence is spoken as
one request, in order, while later text still arrives. The server sends each
sentence's audio as binary frames of 16-bit mono PCM at 24 kHz as the decoder decodes it, then
``{"type": "speech.segment.done", "index": i, "text": sentence}``; after the last,
``{"type": "speech.done", "segments": n}`` and it closes. A bad frame or request is
``{"type": "error", "param": ..., "message": ...}`` and a close (1008).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from typing import Any

from fastapi import WebSocket

logger = logging.getLogger(__name__)

# a sentence ends at terminal punctuation followed by whitespace (or, once the text is done, the
# end); CJK punctuation needs no space after it
_END = re.compile("(?<=[.!?;])\\s+|(?<=[\u3002\uff01\uff1f\uff1b])|\n+")
MAX_TEXT = 65536  # characters buffered and not yet spoken


def sentences(buffer: str, done: bool) -> tuple[list[str], str]:
    """The complete sentences at the start of ``buffer`` and the rest (all of it when ``done``)."""
    parts, last = [], 0
    for match in _END.finditer(buffer):
        piece = buffer[last : match.start()].strip()
        if piece:
            parts.append(piece)
        last = match.end()
    rest = buffer[last:]
    if done and rest.strip():
        parts.append(rest.strip())
        rest = ""
    return parts, rest


class StreamError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def mount_stream(app: Any, engine: Any, speaker: Any) -> None:
    @app.websocket("/v1/audio/speech/stream")
    async def speech_stream(websocket: WebSocket) -> None:
        await serve_stream(websocket, engine, speaker)


async def serve_stream(websocket: Any, engine: Any, speaker: Any) -> None:
    """One connection: a reader queues sentences, a speaker task voices them in order."""
    from starlette.websockets import WebSocketDisconnect

    from omni_qwen3_tts.speech import SpeechRequest

    await websocket.accept()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    config: dict[str, Any] = {}
    task: asyncio.Task[int] | None = None

    async def fail(message: str, param: str | None) -> None:
        event = {"type": "error", "param": param, "message": message}
        with contextlib.suppress(Exception):
            await websocket.send_text(json.dumps(event))
            await websocket.close(code=1008)

    try:
        buffer, done = "", False
        while not done:
            try:
                frame = json.loads(await _next_text(websocket, task))
            except ValueError as exc:
                raise StreamError(f"a frame is not JSON: {exc}") from None
            kind = frame.get("type") if isinstance(frame, dict) else None
            if kind == "session.config" and task is None:
                config = {k: v for k, v in frame.items() if k != "type"}
                if config.get("response_format", "pcm") != "pcm":
                    raise StreamError("response_format: the stream speaks pcm", "response_format")
                config["response_format"] = "pcm"
                try:  # checked now, against a placeholder input
                    SpeechRequest.model_validate({**config, "input": "x"})
                except Exception as exc:
                    raise StreamError(f"session.config: {exc}", "session.config") from None
                continue
            if kind == "input.text.delta":
                delta = frame.get("delta")
                if not isinstance(delta, str):
                    raise StreamError("input.text.delta needs a string delta", "delta")
                buffer += delta
            elif kind == "input.text.done":
                done = True
            else:
                raise StreamError(f"unknown or misplaced frame type {kind!r}", "type")
            if len(buffer) > MAX_TEXT:
                raise StreamError(f"over {MAX_TEXT} characters not yet spoken", "delta")
            ready, buffer = sentences(buffer, done)
            if ready and task is None:
                task = asyncio.create_task(_speak_all(websocket, engine, speaker, config, queue))
            for sentence in ready:
                queue.put_nowait(sentence)
            if task is not None and task.done():
                task.result()  # a failed sentence ends the session with its error
        if task is None:
            raise StreamError("no text to speak", "delta")
        queue.put_nowait(None)
        segments = await task
        await websocket.send_text(json.dumps({"type": "speech.done", "segments": segments}))
        await websocket.close()
    except WebSocketDisconnect:
        pass
    except StreamError as exc:
        await fail(str(exc), exc.param)
    except Exception as exc:  # an ApiError of one sentence (an unknown voice...)
        await fail(getattr(exc, "message", str(exc)), getattr(exc, "param", None))
    finally:
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _next_text(websocket: Any, task: asyncio.Task[int] | None) -> str:
    """The next text frame; while waiting for it, a failed speaker task raises its error (the
    client may be waiting for audio before it sends more)."""
    receive = asyncio.ensure_future(websocket.receive_text())
    if task is None:
        return await receive
    try:
        await asyncio.wait({receive, task}, return_when=asyncio.FIRST_COMPLETED)
        if not receive.done() and task.done():
            task.result()  # raises its error; a task that finished without one waits on
        return await receive
    finally:
        if not receive.done():
            receive.cancel()
            await asyncio.gather(receive, return_exceptions=True)


async def _speak_all(
    websocket: Any, engine: Any, speaker: Any, config: dict[str, Any], queue: Any
) -> int:
    from omni_qwen3_tts.speech import SpeechRequest, open_speech, pcm16

    index = 0
    while (sentence := await queue.get()) is not None:
        body = SpeechRequest.model_validate({**config, "input": sentence})
        async for samples, _ in open_speech(engine, speaker, body):
            await websocket.send_bytes(pcm16(samples))
        event = {"type": "speech.segment.done", "index": index, "text": sentence}
        await websocket.send_text(json.dumps(event))
        index += 1
    return index
