"""Capacity, backpressure, leases (idle, disconnect grace, resume) and the reaper."""

from __future__ import annotations

import asyncio
import random

import pytest
from duplex_helpers import of_type, send_audio, tone, until

from omni_duplex import protocol as P
from omni_duplex.errors import DuplexError

LIMITS = (
    "{model: test-voice, max_sessions: 2, max_pending_input_bytes: 4096, max_pending_turns: 1, "
    "idle_ttl_s: 0.3, disconnect_grace_s: 0.2, cleanup_retry_s: 0.05}"
)


def set_abort_fails(engine, value: bool) -> None:
    """Fault injection: the scripted thinker refuses (or accepts again) aborts."""
    pool = engine._runtime.orchestrator.pools[0]
    for i in range(len(pool.clients)):
        pool.client(i).core.args.abort_fails = value


async def test_capacity_is_retryable_and_the_slot_is_held_until_cleanup(duplex):
    engine = duplex(
        section=LIMITS.replace("idle_ttl_s: 0.3", "idle_ttl_s: 30"),
        thinker="{num_tokens: 500, delay_s: 0.01}",
    )
    a = await engine.open_session({"turn_detection": None})
    b = await engine.open_session({"turn_detection": None})
    with pytest.raises(DuplexError) as err:
        await engine.open_session()
    assert (err.value.code, err.value.retryable) == ("resource_exhausted", True)

    a.send(P.AppendText(text="long"))
    a.send(P.Commit(create_response=True))
    await until(a, of_type(P.TEXT_DELTA))
    set_abort_fails(engine, True)
    await a.close()  # the response is cancelled, but its stage request cannot be aborted yet
    done = (await until(a, of_type(P.RESPONSE_DONE)))[-1]
    assert done.data["status"] == "cancelled"
    await asyncio.sleep(0.2)  # several cleanup retries fail meanwhile
    assert not a.closed and engine.session_count() == 2
    with pytest.raises(DuplexError):
        await engine.open_session()
    set_abort_fails(engine, False)
    closed = await until(a, lambda e: e.terminal, timeout=5)
    assert [e.type for e in closed if e.terminal] == [P.SESSION_CLOSED]
    assert not any(e.type in (P.TEXT_DELTA, P.AUDIO_DELTA) for e in closed)
    c = await engine.open_session()  # the slot is free again
    assert c.id not in (a.id, b.id)


async def test_input_backpressure_on_bytes_and_turns(duplex):
    engine = duplex(section=LIMITS.replace("idle_ttl_s: 0.3", "idle_ttl_s: 30"))
    s = await engine.open_session({"turn_detection": None})
    await until(s, of_type(P.SESSION_CREATED))
    s.send(P.AppendAudio(audio=b"\x00" * 3000, sample_rate_hz=16000, event_id="a1"))
    s.send(P.AppendAudio(audio=b"\x00" * 3000, sample_rate_hz=16000, event_id="a2"))
    err = (await until(s, of_type(P.ERROR)))[-1]
    assert err.data == {
        **err.data,
        "code": "input_backpressure",
        "event_id": "a2",
        "retryable": True,
    }
    s.send(P.Commit())  # frees the buffer
    await until(s, of_type(P.INPUT_COMMITTED))
    s.send(P.AppendText(text="t"))
    s.send(P.Commit(event_id="c2"))  # one committed, unanswered turn is the limit
    err = (await until(s, of_type(P.ERROR)))[-1]
    assert (err.data["code"], err.data["event_id"]) == ("input_backpressure", "c2")
    s.send(P.CreateResponse())  # answering the turn makes room
    await until(s, of_type(P.RESPONSE_DONE))
    s.send(P.Commit())
    assert (await until(s, of_type(P.INPUT_COMMITTED)))[-1].type == P.INPUT_COMMITTED


async def test_idle_session_expires_once(duplex):
    engine = duplex(section=LIMITS)
    s = await engine.open_session()
    events = await until(s, lambda e: e.terminal, timeout=5)
    assert [e.type for e in events] == [P.SESSION_CREATED, P.SESSION_EXPIRED]
    assert events[-1].data["reason"] == "idle_timeout"
    assert engine.session_count() == 0
    with pytest.raises(DuplexError) as err:
        await engine.touch_session(s.id)
    assert err.value.code == "unknown_session"


async def test_detach_resume_replays_missed_events_and_stale_generation_loses(duplex):
    engine = duplex(
        section=LIMITS.replace("idle_ttl_s: 0.3", "idle_ttl_s: 30").replace(
            "disconnect_grace_s: 0.2", "disconnect_grace_s: 2"
        )
    )
    s = await engine.open_session({"turn_detection": None})
    await until(s, of_type(P.SESSION_CREATED))
    await s.detach()
    s.send(P.AppendText(text="while away"))
    s.send(P.Commit())
    await asyncio.sleep(0.05)
    resumed = await engine.resume_session(s.id, s.lease_generation)
    assert resumed.lease_generation == s.lease_generation + 1
    replayed = await until(resumed, of_type(P.INPUT_COMMITTED))
    assert [e.type for e in replayed] == [P.INPUT_COMMITTED]
    with pytest.raises(DuplexError) as err:  # the loser of a takeover
        await engine.resume_session(s.id, s.lease_generation)
    assert err.value.code == "session_resume_conflict"
    await asyncio.sleep(2.2)  # past the old grace: resume cleared the detach
    resumed.send(P.CreateResponse())
    assert (await until(resumed, of_type(P.RESPONSE_DONE)))[-1].data["status"] == "completed"
    await resumed.close()
    await until(resumed, of_type(P.SESSION_CLOSED))


async def test_disconnect_grace_expiry_and_reaper_survives_a_failure(duplex):
    engine = duplex(section=LIMITS.replace("idle_ttl_s: 0.3", "idle_ttl_s: 30"))
    manager = engine._runtime.orchestrator.sessions
    real, calls = manager._reap, []

    def flaky(session_id):
        calls.append(session_id)
        if len(calls) == 1:
            raise RuntimeError("injected reaper failure")
        real(session_id)

    manager._reap = flaky
    s = await engine.open_session()
    await s.detach()
    events = await until(s, lambda e: e.terminal, timeout=5)
    assert (
        events[-1].type == P.SESSION_EXPIRED and events[-1].data["reason"] == "disconnect_timeout"
    )
    assert manager.reaper_failures == 1 and len(calls) >= 2
    assert engine.session_count() == 0


async def test_exactly_one_terminal_per_session_under_random_disconnects(duplex):
    engine = duplex(
        section=LIMITS.replace("max_sessions: 2", "max_sessions: 12")
        .replace("max_pending_input_bytes: 4096", "max_pending_input_bytes: 1000000")
        .replace("max_pending_turns: 1", "max_pending_turns: 8"),
        thinker="{num_tokens: 30, delay_s: 0.005}",
    )
    rng = random.Random(7)
    sessions = [
        # the energy VAD: the random tones start and end turns
        await engine.open_session({"turn_detection": {"vad": "energy", "silence_duration_ms": 60}})
        for _ in range(12)
    ]

    async def drive(s):
        for _ in range(rng.randint(0, 3)):
            send_audio(s, tone(rng.choice([0, 60, 120])) + b"\x00" * 4800)
            if rng.random() < 0.5:
                s.send(P.AppendText(text="x"))
                s.send(P.Commit(create_response=True))
            await asyncio.sleep(rng.random() * 0.05)
        action = rng.choice(["close", "close-twice", "detach", "detach-close", "idle"])
        if action.startswith("detach"):
            await s.detach()
        if "close" in action:
            await s.close()
        if action == "close-twice":
            await s.close("again")
        return [e async for e in s.events()]

    async with asyncio.timeout(20):
        streams = await asyncio.gather(*(drive(s) for s in sessions))
    for events in streams:
        terminals = [e for e in events if e.terminal]
        assert len(terminals) == 1 and events[-1] is terminals[0]
        created = [e for e in events if e.type == P.RESPONSE_CREATED]
        done = [e for e in events if e.type == P.RESPONSE_DONE]
        assert len(created) == len(done)  # every response has exactly one terminal too
    assert engine.session_count() == 0
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_one_client_reconnecting_holds_at_most_its_cap(duplex):
    """Issue 34 item 2: each connection without ``session_id`` opens a session that stays
    (detached) for ``disconnect_grace_s``; one client reconnecting cannot take every slot: at
    ``max_sessions_per_client`` its oldest detached session is closed for the new one, and with
    all of them connected the next is refused (retryable). Other clients are served; a full
    server says when its first detached session expires (``retry_after_s``)."""
    from fake_socket import FakeSocket

    engine = duplex(
        section="{model: test-voice, max_sessions: 4, max_sessions_per_client: 2, "
        "idle_ttl_s: 60, disconnect_grace_s: 30, cleanup_retry_s: 0.05}"
    )
    sessions = engine.orchestrator.sessions.sessions

    async def connect(client: str) -> tuple[FakeSocket, dict]:
        ws = FakeSocket(client=client).start(engine)
        return ws, await ws.recv()

    def held(client: str) -> list[str]:
        return sorted(r.id for r in sessions.values() if r.client == client and r.state == "open")

    ids = []
    for _ in range(6):  # reconnecting without resuming, 6 times
        ws, created = await connect("10.0.0.7")
        assert created["type"] == "session.created", created
        ids.append(created["session"]["id"])
        await ws.stop()  # a disconnect: the session is detached, kept for a resume
        assert len(held("10.0.0.7")) <= 2
    await asyncio.sleep(0.05)
    assert held("10.0.0.7") == sorted(ids[-2:]) and engine.session_count() == 2
    live = [await connect("10.0.0.7") for _ in range(2)]  # the two detached ones make room
    assert held("10.0.0.7") == sorted(created["session"]["id"] for _, created in live)
    ws, refused = await connect("10.0.0.7")  # both connected: refused
    await ws.task
    assert refused["type"] == "error" and ws.close_code == 1013, refused
    error = refused["error"]
    assert error["code"] == "client_session_limit" and error["retryable"], error
    assert "max_sessions_per_client (2)" in error["message"] and error["type"] == "rate_limit_error"
    other, created = await connect("10.0.0.8")  # everyone else is served
    assert created["type"] == "session.created"
    gone, _ = await connect("10.0.0.9")
    await gone.stop()
    ws, full = await connect("10.0.0.10")  # the server is full: when to retry
    await ws.task
    assert full["error"]["code"] == "resource_exhausted", full
    assert 0 < full["error"]["retry_after_s"] <= 30
    for ws, _ in [*live, (other, None)]:
        await ws.stop()
