"""End to end: a real WebSocket client against ``omni serve``'s app on loopback, and
``omni duplex talk`` (in-process and over the socket)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave
from contextlib import contextmanager

from duplex_helpers import pipeline, register, silence, spoken
from omni_core.testing.server import running_server
from websockets.asyncio.client import connect


@contextmanager
def serving(pipe):
    with running_server(pipe, entry_points=True) as (base, engine, _):
        yield base.replace("http://", "ws://") + "/v1/realtime", engine


async def recv_until(ws, kind, seen=None, timeout=10.0):
    seen = [] if seen is None else seen
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            seen.append(event)
            if event["type"] == kind:
                return seen


async def append(ws, pcm):
    for i in range(0, len(pcm), 960):
        await ws.send(
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(pcm[i : i + 960]).decode(),
                }
            )
        )


async def test_realtime_websocket_turn_barge_in_and_disconnect(fake_entry_points):
    register(fake_entry_points)
    with serving(pipeline(thinker="{num_tokens: 150, delay_s: 0.01}")) as (url, engine):
        async with connect(url) as ws:
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created" and created["session"]["id"].startswith(
                "duplex-"
            )
            await ws.send(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {
                            "audio": {
                                "input": {
                                    "turn_detection": {
                                        "type": "server_vad",
                                        "silence_duration_ms": 200,
                                    }
                                }
                            }
                        },
                    }
                )
            )
            await recv_until(ws, "session.updated")
            await append(ws, spoken() + silence(500))
            seen = await recv_until(ws, "response.output_audio.delta")
            kinds = [e["type"] for e in seen]
            assert kinds[:4] == [
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "response.created",
            ]
            assert "response.output_text.delta" in kinds
            assert len(base64.b64decode(seen[-1]["delta"])) > 0
            first = seen[3]["response"]["id"]
            # barge-in: the user speaks while the reply plays
            await append(ws, spoken("speech_interrupt") + silence(500))
            seen = await recv_until(ws, "response.done")
            while seen[-1]["response"]["id"] != first:
                seen = await recv_until(ws, "response.done", seen)
            assert seen[-1]["response"]["status"] == "cancelled"
            assert "input_audio_buffer.speech_started" in [e["type"] for e in seen]
            after = await recv_until(ws, "response.created")
            assert all(e.get("response_id") != first for e in after)
            await ws.send(json.dumps({"type": "nonsense"}))
            err = await recv_until(ws, "error")
            assert err[-1]["error"]["code"] == "unknown_event"
        # the socket is gone: the session is detached, then expires after the grace
        deadline = time.monotonic() + 5
        while engine.session_count() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert engine.session_count() == 0


def write_wav(path, pcm, rate=24000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return path


def load_timeline(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_talk_in_process_writes_reply_and_timeline(duplex, tmp_path):
    from omni_duplex.talk import talk

    engine = duplex(
        section="{model: test-voice, session_defaults: {turn_detection: {silence_duration_ms: 200}}}"
    )
    wav = write_wav(tmp_path / "in.wav", silence(100) + spoken() + silence(300))
    reply, timeline = await talk(wav, out_dir=tmp_path, engine=engine, fast=True)
    with wave.open(str(reply)) as w:
        frames = w.readframes(w.getnframes())
    assert w.getframerate() == 24000 and any(frames)
    events = [e["event"]["type"] for e in load_timeline(timeline)]
    assert events[0] == "session.created" and "response.output_audio.delta" in events
    assert events.count("response.done") == 1


async def test_talk_over_socket_shows_cancelled_reply_before_the_next_one(
    fake_entry_points, tmp_path
):
    from omni_duplex.talk import talk

    register(fake_entry_points)
    section = "{model: test-voice, session_defaults: {turn_detection: {silence_duration_ms: 200}}}"
    wav = write_wav(
        tmp_path / "barge.wav",
        spoken() + silence(400) + spoken("speech_interrupt") + silence(500),
    )
    with serving(pipeline(section=section, thinker="{num_tokens: 300, delay_s: 0.005}")) as (
        url,
        _,
    ):
        reply, timeline = await talk(wav, out_dir=tmp_path, url=url)  # real time
    entries = [e["event"] for e in load_timeline(timeline)]
    dones = [i for i, e in enumerate(entries) if e["type"] == "response.done"]
    first_done = entries[dones[0]]
    assert first_done["response"]["status"] == "cancelled"
    first_id = first_done["response"]["id"]
    second_created = next(
        i
        for i, e in enumerate(entries)
        if e["type"] == "response.created" and e["response"]["id"] != first_id
    )
    assert dones[0] < second_created
    assert all(e.get("response_id") != first_id for e in entries[dones[0] :])
    assert entries[dones[-1]]["response"]["status"] == "completed"
    assert reply.stat().st_size > 44
