"""A property-based fuzz over duplex session lifetimes (issue 34 item 8): random sequences of
open (by one of three clients), typed turns (some the stage refuses), responses, cancels,
detaches, resumes (some with a stale generation), closes and waits, on the scripted pipeline
with small limits. After each sequence every session is closed. Properties: every session ends
with exactly one terminal event and every response with exactly one ``response.done``; no
``internal_error``, only the errors the sequence can cause; at no point more sessions than
``max_sessions`` or, for one client, ``max_sessions_per_client``; the history holds no empty
replies, and a turn the stage refused (too long) leaves it unless its response was cancelled
before the refusal came; afterwards no session and no stage request is left, and the
process's peak RSS stays bounded over the run.

Slow tier (~0.2 s an example). ``DUPLEX_LIFETIME_EXAMPLES=N`` runs more, randomized.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource

import pytest
from duplex_helpers import Refusing, stage_running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omni_core.testing.tiers import examples

from omni_duplex import protocol as P
from omni_duplex.errors import DuplexError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_SESSIONS, PER_CLIENT, LONG = 4, 2, 200
SECTION = (
    f"{{model: test-voice, max_sessions: {MAX_SESSIONS}, max_sessions_per_client: {PER_CLIENT}, "
    "max_pending_turns: 2, max_history_turns: 4, idle_ttl_s: 30, disconnect_grace_s: 0.15, "
    "cleanup_retry_s: 0.05, session_defaults: {turn_detection: null}}"
)
EXAMPLES = int(os.environ.get("DUPLEX_LIFETIME_EXAMPLES", "30"))
RSS_GROWTH_MIB = 256  # peak RSS growth over the run (1000 examples: see docs/duplex.md)
SESSION_ERRORS = {  # what a sequence of valid commands may be answered with
    "input_backpressure",
    "conversation_already_has_active_response",
    "response_cancel_not_active",
    "input_audio_buffer_commit_empty",
    "input_rejected",
    "session_closed",
}
OPEN_ERRORS = {"resource_exhausted", "client_session_limit"}

slots = st.integers(0, 5)
ops = st.one_of(
    st.tuples(st.just("open"), st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"])),
    st.tuples(st.just("turn"), slots, st.sampled_from([1, 20, LONG + 1])),
    st.tuples(st.just("create"), slots),
    st.tuples(st.just("cancel"), slots),
    st.tuples(st.just("close"), slots),
    st.tuples(st.just("detach"), slots),
    st.tuples(st.just("resume"), slots, st.booleans()),
    st.tuples(st.just("wait"), st.sampled_from([0.0, 0.01, 0.05, 0.2])),
)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Lifetimes:
    """The sessions of one sequence: handles, the events of each session id, its generation."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ids: list[str] = []
        self.handles: dict[str, object] = {}
        self.events: dict[str, list[P.DuplexEvent]] = {}
        self.drains: list[asyncio.Task] = []

    def drain(self, handle) -> None:
        async def run() -> None:
            with contextlib.suppress(DuplexError):
                async for event in handle.events():
                    self.events[handle.id].append(event)

        self.handles[handle.id] = handle
        self.drains.append(asyncio.ensure_future(run()))

    def pick(self, index: int):
        return self.handles[self.ids[index % len(self.ids)]] if self.ids else None

    def check_caps(self) -> None:
        runners = list(self.engine.orchestrator.sessions.sessions.values())
        assert len(runners) <= MAX_SESSIONS
        for client in {r.client for r in runners}:  # (one it closed for a new one may linger)
            assert sum(r.client == client and r.state == "open" for r in runners) <= PER_CLIENT
        for runner in runners:  # no empty replies
            for item in runner.history:
                if item["role"] == "assistant":
                    assert item["text"] or item.get("audio_ms"), runner.history

    async def settle(self) -> None:
        """Until no response runs; then a long (refused) turn stays only if its response was
        cancelled before the refusal came."""
        sessions = self.engine.orchestrator.sessions.sessions
        async with asyncio.timeout(10):
            while any(r.response is not None or r.live_runs for r in sessions.values()):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)
        for sid, runner in list(sessions.items()):
            owner, pending, status = {}, [], {}
            for event in self.events.get(sid, []):
                if event.type == P.INPUT_COMMITTED:
                    pending.append(event.data["item_id"])
                elif event.type == P.RESPONSE_CREATED:
                    owner.update(dict.fromkeys(pending, event.data["response_id"]))
                    pending = []
                elif event.type == P.RESPONSE_DONE:
                    status[event.data["response_id"]] = event.data["status"]
            for item in runner.history:
                if len(item["text"]) > LONG:  # (unknown while its events are journaled)
                    done = status.get(owner.get(item["item_id"], ""), "cancelled")
                    assert done == "cancelled", (item["item_id"], done)

    async def apply(self, op: tuple) -> None:
        kind, *args = op
        handle = self.pick(args[0]) if kind not in ("open", "wait") else None
        if kind == "open":
            try:
                handle = await self.engine.open_session(client=args[0])
            except DuplexError as exc:
                assert exc.code in OPEN_ERRORS and exc.retryable, exc
                return
            self.ids.append(handle.id)
            self.events[handle.id] = []
            self.drain(handle)
        elif kind == "wait":
            await asyncio.sleep(args[0])
        elif handle is None:
            return
        elif kind == "turn":
            handle.send(P.AppendText(text="t" * args[1], commit=True))
            handle.send(P.CreateResponse())
        elif kind == "create":
            handle.send(P.CreateResponse())
        elif kind == "cancel":
            handle.send(P.CancelResponse())
        elif kind == "close":
            await self.engine.close_session(handle.id)
        elif kind == "detach":
            with contextlib.suppress(DuplexError):  # ended meanwhile
                await handle.detach()
        elif kind == "resume":
            stale = args[1]
            generation = handle.lease_generation - (1 if stale else 0)
            try:
                resumed = await self.engine.resume_session(handle.id, generation)
            except DuplexError as exc:
                ended = ("unknown_session", "session_closed")
                assert exc.code in ("session_resume_conflict", *ended), exc
                assert stale or exc.code in ended or handle.lease_generation == 0, exc
                return
            self.drain(resumed)
        self.check_caps()

    async def finish(self) -> None:
        for sid in self.ids:
            with contextlib.suppress(DuplexError):
                await self.engine.close_session(sid)
        async with asyncio.timeout(10):
            while any(not any(e.terminal for e in self.events[sid]) for sid in self.ids):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)  # anything after a terminal would show now
        for task in self.drains:
            task.cancel()
        await asyncio.gather(*self.drains, return_exceptions=True)


@pytest.fixture
def lifetimes(duplex):
    engine = duplex(section=SECTION)
    Refusing(engine, limit=LONG)
    stats = {"examples": 0, "ops": 0, "start": rss_mib(), "peak": rss_mib()}
    yield engine, stats
    growth = stats["peak"] - stats["start"]
    print(f"\nlifetime fuzz: {stats['examples']} examples, {stats['ops']} ops, +{growth:.1f} MiB")


@settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    derandomize=EXAMPLES <= 30,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=st.lists(ops, min_size=1, max_size=14))
async def test_fuzz_session_lifetimes(lifetimes, sequence):
    engine, stats = lifetimes
    run = Lifetimes(engine)
    try:
        for op in sequence:
            await run.apply(op)
        await run.settle()
    finally:
        await run.finish()
    for sid in run.ids:
        events = run.events[sid]
        terminals = [e for e in events if e.terminal]
        assert len(terminals) == 1 and events[-1].terminal, [e.type for e in events]
        created = [e.data["response_id"] for e in events if e.type == P.RESPONSE_CREATED]
        done = [e.data["response_id"] for e in events if e.type == P.RESPONSE_DONE]
        assert sorted(created) == sorted(done) and len(set(done)) == len(done), (created, done)
        codes = [e.data["code"] for e in events if e.type == P.ERROR]
        assert set(codes) <= SESSION_ERRORS, codes
    assert engine.session_count() == 0
    assert await stage_running(engine) == []
    stats["examples"] += 1
    stats["ops"] += len(sequence)
    stats["peak"] = max(stats["peak"], rss_mib())
    assert stats["peak"] - stats["start"] < RSS_GROWTH_MIB
