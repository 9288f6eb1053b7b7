"""``omni duplex talk`` as a user runs it, on generated WAVs against real ``tiny-omni-duplex``:
in-process (the engine runs in the CLI), and over ``--url`` against ``omni serve`` on loopback."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from tests.serve.conftest import free_port

RATE = 24_000


def tone(ms: int, amp: float = 0.3) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(
        f"<{n}h", *(int(amp * 32767 * math.sin(2 * math.pi * 220 * i / RATE)) for i in range(n))
    )


def silence(ms: int) -> bytes:
    return b"\x00\x00" * (RATE * ms // 1000)


def write_wav(path: Path, pcm: bytes) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm)
    return path


def talk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        # the energy VAD: the WAVs speak in tones (the default Silero VAD only hears speech)
        [sys.executable, "-m", "omni_core.cli", "duplex", "talk", "--vad", "energy", *args],
        capture_output=True,
        text=True,
        timeout=240,
    )


def outputs(result: subprocess.CompletedProcess) -> tuple[bytes, list[dict]]:
    """(reply.wav frames, timeline events) from the two paths the command printed."""
    assert result.returncode == 0, result.stderr[-3000:]
    reply, timeline = (Path(p) for p in result.stdout.strip().splitlines()[-2:])
    assert reply.name == "reply.wav" and timeline.name == "timeline.jsonl"
    with wave.open(str(reply)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1
        frames = w.readframes(w.getnframes())
    return frames, [json.loads(line) for line in timeline.read_text().splitlines()]


def peak(pcm: bytes) -> int:
    return max((abs(s) for s in struct.unpack(f"<{len(pcm) // 2}h", pcm)), default=0)


@pytest.mark.timeout(300)
def test_talk_in_process_writes_a_non_silent_reply_and_the_server_timeline(tmp_path):
    # a burst, a pause long enough for the short default reply, another burst
    wav = write_wav(tmp_path / "in.wav", tone(300) + silence(900) + tone(300) + silence(100))
    frames, entries = outputs(talk(str(wav), "--out", str(tmp_path / "out")))
    events = [e["event"] for e in entries]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.created" and events[0]["session"]["capabilities"]["barge_in"]
    times = [e["t"] for e in entries]
    assert times == sorted(times) and times[-1] >= 1.6  # streamed in real time (1.6 s of audio)
    assert kinds.count("input_audio_buffer.speech_started") == 2
    dones = [e["response"] for e in events if e["type"] == "response.done"]
    assert [d["status"] for d in dones] == ["completed", "completed"]
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert len(frames) == sum(d["delta_bytes"] for d in deltas) > 0  # reply.wav = the deltas
    assert peak(frames) > 1000  # non-silent
    assert sum(d["audio_ms"] for d in dones) == round(len(frames) / 2 / 24)


@pytest.fixture(scope="module")
def served():
    """``omni serve tiny-omni-duplex`` on loopback; yields its ``/v1/realtime`` URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k == "OMNI_CACHE_DIR" or k[:5] != "OMNI_"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_core.cli", "serve", "tiny-omni-duplex", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # blocks until the server says it accepts connections
            seen.append(line)
            if "listening on http://" in line:
                break
        else:
            pytest.fail(f"omni serve exited {proc.wait()}: {''.join(seen)[-3000:]}")
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        proc.terminate()
        proc.wait(60)


@pytest.mark.timeout(300)
def test_talk_over_url_shows_the_cancelled_reply_before_the_next_one(served, tmp_path):
    # a 400 ms pause ends the first turn (200 ms of silence do); the second burst starts while
    # the first (long) reply is still playing
    wav = write_wav(tmp_path / "barge.wav", tone(300) + silence(400) + tone(300) + silence(100))
    options = ("--max-output-tokens", "400", "--silence-ms", "200", "--out", str(tmp_path))
    result = talk(str(wav), "--url", served, *options)
    frames, entries = outputs(result)
    events = [e["event"] for e in entries]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["session.created", "session.updated"]
    dones = [i for i, e in enumerate(events) if e["type"] == "response.done"]
    first = events[dones[0]]["response"]
    assert first["status"] == "cancelled" and first["status_details"]["reason"] == "turn_detected"
    # the barge-in: speech started while the reply played (after its first output)
    first_output = next(i for i, e in enumerate(events) if e.get("response_id") == first["id"])
    barge = [i for i, k in enumerate(kinds) if k == "input_audio_buffer.speech_started"][1]
    assert first_output < barge < dones[0]
    # nothing of the next response (nor of the cancelled one) before / after the terminal
    others = [i for i, e in enumerate(events) if _response_of(e) not in (None, first["id"])]
    assert others and min(others) > dones[0]
    assert all(_response_of(e) != first["id"] for e in events[dones[0] + 1 :])
    assert events[dones[-1]]["response"]["status"] == "completed" and len(dones) == 2
    assert peak(frames) > 1000


def _response_of(event: dict) -> str | None:
    if event["type"] in ("response.created", "response.done"):
        return event["response"]["id"]
    return event.get("response_id")
