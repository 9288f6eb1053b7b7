"""``omni duplex talk``: stream a WAV into a session, record the reply and a timeline.

In-process by default (the engine runs here); ``url`` talks to ``omni serve`` over
``/v1/realtime``. The WAV is streamed in 20 ms chunks in real time (``fast``: as fast as possible),
followed by trailing silence so that server VAD ends the last turn.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import wave
from pathlib import Path
from typing import Any

from omni_duplex.config import WIRE_SAMPLE_RATE
from omni_duplex.errors import DuplexError

logger = logging.getLogger(__name__)

CHUNK_MS = 20
TRAILING_SILENCE_MS = 1500


def read_wav(path: str | Path) -> bytes:
    """Any pcm16 WAV → mono pcm16 bytes at the wire rate."""
    import numpy as np

    from omni_duplex.audio import encode_pcm16, resample

    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise DuplexError("invalid_audio", f"{path}: only 16-bit PCM WAV files are supported")
        rate, channels = wav.getframerate(), wav.getnchannels()
        frames = wav.readframes(wav.getnframes())
    samples = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels)[:, 0]
    return encode_pcm16(resample(samples, rate, WIRE_SAMPLE_RATE))


def write_wav(path: Path, pcm: bytes) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(WIRE_SAMPLE_RATE)
        out.writeframes(pcm)
    return path


class _Inline:
    """The same wire events, without a socket (engine in this process)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def send(self, event: dict[str, Any]) -> None:
        from omni_duplex.realtime import commands_from_client

        for command in commands_from_client(event):
            self.session.send(command)

    async def recv(self) -> dict[str, Any] | None:
        from omni_duplex.realtime import to_server_event

        if self.session.closed:
            return None
        return to_server_event(await self.session.recv())


class _Socket:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def recv(self) -> dict[str, Any] | None:
        from websockets.exceptions import ConnectionClosed

        try:
            event: dict[str, Any] = json.loads(await self.ws.recv())
            return event
        except ConnectionClosed:
            return None


async def converse(
    conn: Any,
    pcm: bytes,
    *,
    fast: bool,
    timeout_s: float,
    session: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Stream ``pcm`` (after a ``session.update`` with ``session``, if given); return the timeline
    (every server event with its time)."""
    timeline: list[dict[str, Any]] = []
    start = time.monotonic()
    fenced = asyncio.Event()
    idle = asyncio.Event()
    state = {"open": 0}

    async def receive() -> None:
        while True:
            event = await conn.recv()
            if event is None:
                return
            timeline.append({"t": round(time.monotonic() - start, 4), "event": event})
            kind = event.get("type")
            if kind == "response.created":
                state["open"] += 1
            elif kind == "response.done":
                state["open"] -= 1
            elif kind == "input_audio_buffer.cleared":
                fenced.set()
            elif kind in ("session.closed", "session.expired"):
                return
            if fenced.is_set() and state["open"] == 0:
                idle.set()

    receiver = asyncio.ensure_future(receive())
    step = WIRE_SAMPLE_RATE * CHUNK_MS // 1000 * 2
    audio = pcm + b"\x00" * (WIRE_SAMPLE_RATE * TRAILING_SILENCE_MS // 1000 * 2)
    try:
        async with asyncio.timeout(timeout_s):
            if session:
                await conn.send({"type": "session.update", "session": session})
            for i, offset in enumerate(range(0, len(audio), step)):
                chunk = base64.b64encode(audio[offset : offset + step]).decode()
                await conn.send({"type": "input_audio_buffer.append", "audio": chunk})
                if not fast:  # real time: the next chunk is due CHUNK_MS later
                    await asyncio.sleep(
                        max(0.0, start + (i + 1) * CHUNK_MS / 1000 - time.monotonic())
                    )
            # a fence: events of every append above come before `cleared`
            await conn.send({"type": "input_audio_buffer.clear"})
            await idle.wait()
    finally:
        receiver.cancel()
        await asyncio.gather(receiver, return_exceptions=True)
    return timeline


class NoSpeechHeard(DuplexError):
    """The session's voice detector heard no speech in the input: there is nothing to reply to.
    ``reply`` (empty) and ``timeline`` were written all the same."""

    def __init__(self, message: str, reply: Path, timeline: Path) -> None:
        super().__init__("no_speech", message)
        self.reply, self.timeline = reply, timeline


def heard_speech(timeline: list[dict[str, Any]]) -> bool:
    """Whether the server's VAD reported speech anywhere in the conversation."""
    return any(e["event"].get("type") == "input_audio_buffer.speech_started" for e in timeline)


def session_vad(timeline: list[dict[str, Any]]) -> str | None:
    """The VAD the session ran (its last ``session.created``/``session.updated``), if it says."""
    vad = None
    for entry in timeline:
        event = entry["event"]
        if event.get("type") not in ("session.created", "session.updated"):
            continue
        session = event.get("session") or {}
        for detection in (
            session.get("turn_detection"),
            ((session.get("audio") or {}).get("input") or {}).get("turn_detection"),
        ):
            if isinstance(detection, dict) and detection.get("vad"):
                vad = str(detection["vad"])
    return vad


def check_heard(wav: str | Path, timeline: list[dict[str, Any]], reply: Path, path: Path) -> None:
    """Raise :class:`NoSpeechHeard` (naming the file and the VAD, suggesting ``--vad energy``)
    when the VAD heard no speech: an empty reply is not a conversation."""
    if heard_speech(timeline):
        return
    vad = session_vad(timeline)
    hint = (
        ""
        if vad == "energy"
        else "; if the recording has speech the detector misses (quiet, noisy, synthetic), try "
        "--vad energy (any loud sound counts)"
    )
    raise NoSpeechHeard(
        f"{wav}: the voice detector{f' ({vad})' if vad else ''} heard no speech in it, so there "
        f"is no reply (the empty {reply} and {path} were written){hint}",
        reply,
        path,
    )


def save(timeline: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    pcm = b"".join(
        base64.b64decode(e["event"]["delta"])
        for e in timeline
        if e["event"].get("type") == "response.output_audio.delta"
    )
    reply = write_wav(out_dir / "reply.wav", pcm)
    path = out_dir / "timeline.jsonl"
    with path.open("w") as f:
        for entry in timeline:
            event = dict(entry["event"])
            if event.get("type") == "response.output_audio.delta":
                event["delta_bytes"] = len(base64.b64decode(event.pop("delta")))
            f.write(json.dumps({"t": entry["t"], "event": event}) + "\n")
    return reply, path


async def talk(
    wav: str | Path,
    *,
    out_dir: str | Path = ".",
    url: str | None = None,
    pipeline: Any = "tiny-omni-duplex",
    fast: bool = False,
    engine: Any = None,
    timeout_s: float = 300.0,
    session: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Run one conversation; returns (reply.wav, timeline.jsonl). ``session``: a Realtime
    ``session`` object sent as ``session.update`` before the audio. Raises
    :class:`NoSpeechHeard` (after writing both) when the VAD heard no speech."""
    pcm = read_wav(wav)
    if url is not None:
        from websockets.asyncio.client import connect

        async with connect(url, max_size=None) as ws:
            timeline = await converse(
                _Socket(ws), pcm, fast=fast, timeout_s=timeout_s, session=session
            )
        return _saved(wav, timeline, Path(out_dir))
    owned = engine is None
    if engine is None:
        from omni_core import create_engine_async

        engine = await create_engine_async(pipeline)
    try:
        handle = await engine.open_session()
        try:
            timeline = await converse(
                _Inline(handle), pcm, fast=fast, timeout_s=timeout_s, session=session
            )
        finally:
            await handle.close()
    finally:
        if owned:
            await asyncio.to_thread(engine.shutdown)
    return _saved(wav, timeline, Path(out_dir))


def _saved(wav: str | Path, timeline: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    reply, path = save(timeline, out_dir)
    check_heard(wav, timeline, reply, path)
    return reply, path
