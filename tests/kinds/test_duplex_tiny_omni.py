"""omni-duplex sessions on the real ``tiny-omni-duplex`` pipeline (vLLM thinker and talker, the
vocoder): one shared engine for the module (real engines are slow to start)."""

from __future__ import annotations

import asyncio
import math
import struct

import pytest
from omni_duplex import protocol as P

from omni_core import create_engine

RATE = 24_000
LONG_REPLY = 400  # thinker tokens: the reply is still being generated when the user barges in
# the energy VAD: these tests speak in tones (the default Silero VAD only hears speech)
VAD = {
    "vad": "energy",
    "silence_duration_ms": 200,
    "min_speech_duration_ms": 100,
    "prefix_padding_ms": 0,
}


@pytest.fixture(scope="module")
def engine():
    engine = create_engine("tiny-omni-duplex")
    yield engine
    engine.shutdown()


def tone(ms: int, amp: float = 0.3) -> bytes:
    n = RATE * ms // 1000
    return struct.pack(
        f"<{n}h", *(int(amp * 32767 * math.sin(2 * math.pi * 220 * i / RATE)) for i in range(n))
    )


def silence(ms: int) -> bytes:
    return b"\x00\x00" * (RATE * ms // 1000)


def send_audio(session, pcm: bytes) -> None:
    for offset in range(0, len(pcm), 960):  # 20 ms chunks
        session.send(P.AppendAudio(audio=pcm[offset : offset + 960]))


def peak(pcm: bytes) -> int:
    return max(abs(s) for s in struct.unpack(f"<{len(pcm) // 2}h", pcm))


async def until(session, predicate, seen=None, timeout=60.0):
    seen = [] if seen is None else seen
    async with asyncio.timeout(timeout):
        while True:
            event = await session.recv()
            assert event.type != P.ERROR, event.data
            seen.append(event)
            if predicate(event):
                return seen


def done_of(response_id):
    return lambda e: e.type == P.RESPONSE_DONE and e.data["response_id"] == response_id


def test_one_spoken_turn_gives_non_silent_audio_deltas(engine):
    async def go():
        session = await engine.open_session({"turn_detection": VAD})
        assert session.capabilities["model"] == "tiny-omni"
        send_audio(session, tone(300) + silence(300))
        seen = await until(session, lambda e: e.type == P.RESPONSE_DONE)
        await session.close()
        closed = await until(session, lambda e: e.terminal)
        return seen, closed

    seen, closed = asyncio.run(go())
    kinds = [e.type for e in seen]
    assert kinds[:5] == [
        P.SESSION_CREATED,
        P.SPEECH_STARTED,
        P.SPEECH_STOPPED,
        P.INPUT_COMMITTED,
        P.RESPONSE_CREATED,
    ]
    audio = b"".join(e.data["audio"] for e in seen if e.type == P.AUDIO_DELTA)
    assert kinds.count(P.AUDIO_DELTA) > 1  # streamed chunk by chunk, not one blob
    assert len(audio) > 0 and peak(audio) > 1000  # non-silent
    assert kinds.count(P.TEXT_DELTA) > 0
    done = seen[-1].data
    assert done["status"] == "completed" and done["text"]
    assert done["audio_ms"] == round(len(audio) / 2 / 24)
    assert [e.type for e in closed] == [P.SESSION_CLOSED]


def test_barge_in_cancels_the_playing_reply_before_any_output_of_the_next(engine):
    async def go():
        session = await engine.open_session(
            {"turn_detection": VAD, "max_output_tokens": LONG_REPLY}
        )
        send_audio(session, tone(300) + silence(300))
        seen = await until(session, lambda e: e.type == P.AUDIO_DELTA)
        first = next(e for e in seen if e.type == P.RESPONSE_CREATED).data["response_id"]
        # the user speaks again while the reply plays, then pauses: a new turn
        send_audio(session, tone(300) + silence(300))
        after = await until(session, done_of(first))
        second = await until(session, lambda e: e.type == P.RESPONSE_CREATED)
        rest = await until(session, done_of(second[-1].data["response_id"]))
        await session.close()
        await until(session, lambda e: e.terminal)
        return first, after, second, rest

    first, after, second, rest = asyncio.run(go())
    cancelled = after[-1]
    assert cancelled.data["status"] == "cancelled" and cancelled.data["reason"] == "turn_detected"
    assert P.SPEECH_STARTED in [e.type for e in after]  # the barge-in caused it
    later = second + rest
    # nothing of the cancelled reply after its terminal, and everything later in a newer epoch
    assert all(e.data.get("response_id") != first for e in later)
    assert all(e.epoch > cancelled.epoch for e in later)
    # the next reply's output comes only after the cancelled terminal, and it plays in full
    assert [e.type for e in second][-1] == P.RESPONSE_CREATED
    assert not any(e.type in (P.AUDIO_DELTA, P.TEXT_DELTA) for e in second)
    assert any(e.type == P.AUDIO_DELTA for e in rest)
    assert rest[-1].data["status"] == "completed"


def test_barge_in_aborts_the_reply_stage_requests(engine):
    async def go():
        session = await engine.open_session(
            {"turn_detection": VAD, "max_output_tokens": LONG_REPLY}
        )
        send_audio(session, tone(300) + silence(300))
        await until(session, lambda e: e.type == P.AUDIO_DELTA)
        send_audio(session, tone(200))  # speech without a pause: no new turn yet
        seen = await until(session, lambda e: e.type == P.RESPONSE_DONE)
        # the session applies a command only after the previous one (the abort) returned
        session.send(P.ClearInput())
        await until(session, lambda e: e.type == P.INPUT_CLEARED)
        states = await engine.collective_rpc("get_state", stage_ids=[0, 1])
        tables = engine.request_tables()
        await session.close()
        await until(session, lambda e: e.terminal)
        return seen, states, tables

    seen, states, tables = asyncio.run(go())
    assert seen[-1].data["status"] == "cancelled"
    assert len(states) == 2 and all(s["unfinished"] == 0 for s in states)  # thinker, talker
    assert tables["runs"] == 0 and tables["bindings"] == 0
