"""A property-based fuzz over ``/v1/realtime`` client events (issue 24): random JSON shapes, types
and sizes against a session on the scripted pipeline. Each frame gets its normal response or
exactly one ``error`` event, the socket stays open, and what a session keeps stays bounded.

``DUPLEX_FUZZ_EXAMPLES=N`` runs more examples (the figures in docs/duplex.md); the suite runs a
small, derandomized set.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import resource

import pytest
from fake_socket import FakeSocket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omni_core.testing.tiers import examples

from omni_duplex.client_events import ClientEventError, decode_frame

LIMIT = 16384  # max_pending_input_bytes
SECTION = (
    f"{{model: test-voice, max_sessions: 8, max_pending_input_bytes: {LIMIT}, "
    "max_pending_turns: 2, max_event_bytes: 65536, max_history_turns: 4, "
    "max_history_bytes: 4096, idle_ttl_s: 30, disconnect_grace_s: 0, cleanup_retry_s: 0.05, "
    "session_defaults: {turn_detection: null}}"
)
EXAMPLES = int(os.environ.get("DUPLEX_FUZZ_EXAMPLES", "25"))
TYPES = [
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "response.create",
    "response.cancel",
    "session.update",
]
READER_CODES = {"invalid_event", "unknown_event", "invalid_audio", "event_too_large"}
_ids = itertools.count()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
sizes = st.sampled_from([0, 1, 2, 3, 640, 960, 4001, 9000, 20_000, 40_000])
audio = sizes.flatmap(
    lambda n: st.just(base64.b64encode(b"\x10\x00" * (n // 2) + b"\x01" * (n % 2)).decode())
)
texts = st.one_of(st.text(max_size=30), sizes.map(lambda n: "t" * n))
fields = {
    "audio": st.one_of(audio, json_values, st.just("not base64!")),
    "item": st.one_of(
        st.builds(
            lambda text, role, kind: {
                "type": "message",
                "role": role,
                "content": [{"type": kind, "text": text}],
            },
            st.one_of(texts, json_values),
            st.sampled_from(["user", "user", "assistant", 5]),
            st.sampled_from(["input_text", "text", "input_audio"]),
        ),
        json_values,
    ),
    "session": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "instructions": st.one_of(st.text(max_size=20), json_values),
                "output_modalities": st.one_of(
                    st.sampled_from([["text"], ["audio"], ["text", "audio"]]), json_values
                ),
                "max_output_tokens": st.one_of(st.integers(-2, 50), st.just("inf"), json_values),
                "turn_detection": st.one_of(
                    st.none(), st.just({"type": "server_vad", "vad": "energy"}), json_values
                ),
                "audio": st.one_of(
                    st.just({"input": {"format": {"type": "audio/pcm", "rate": 16000}}}),
                    json_values,
                ),
            },
        ),
        json_values,
    ),
    "response": st.one_of(
        st.none(), st.dictionaries(st.text(max_size=8), json_values, max_size=2), json_values
    ),
}
events = st.builds(
    lambda kind, extra, drop_id: (
        {"type": kind, **extra} | ({} if drop_id else {"event_id": f"f{next(_ids)}"})
    ),
    st.one_of(st.sampled_from(TYPES), json_values),
    st.fixed_dictionaries({}, optional={**fields, "bogus": json_values, "event_id": json_values}),
    st.booleans(),
)
frames = st.one_of(
    events.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.sampled_from(["{", "[" * 5000, '{"type": ' + "9" * 5000 + "}", "x" * 70_000]),
)


def expected_reader_error(frame: str | bytes) -> tuple[bool, str | None]:
    """(does the parser refuse it, the event_id its error carries)."""
    try:
        decode_frame(frame, 65536)
    except ClientEventError as exc:
        return True, exc.event_id
    return False, None


def retained_bytes(runner) -> int:
    turns = sum(
        len(t.text.encode()) + (t.audio.size * 2 if t.audio is not None else 0)
        for t in runner.turns
    )
    text = sum(len(t.encode()) for t in runner.text_parts)
    return runner.buffer_bytes + text + turns + runner.history_bytes


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


@pytest.fixture
def duplex_fuzz(duplex):
    """One engine for all the examples; prints the run's figures at the end (``-s``)."""
    engine = duplex(section=SECTION)
    stats = {"examples": 0, "frames": 0, "rss_start_mib": rss_mib(), "max_rss_mib": rss_mib()}
    yield engine, stats
    growth = stats["max_rss_mib"] - stats["rss_start_mib"]
    print(
        f"\nduplex fuzz: {stats['examples']} examples, {stats['frames']} frames, max RSS growth {growth:.1f} MiB"
    )


@settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    derandomize=EXAMPLES <= 25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(frames, min_size=1, max_size=6))
async def test_fuzz_client_events(duplex_fuzz, batch):
    engine, stats = duplex_fuzz
    ws = FakeSocket().start(engine)
    created = await ws.recv()
    assert created["type"] == "session.created"
    runner = engine.orchestrator.sessions.sessions[created["session"]["id"]]
    refused: dict[str | None, int] = {}
    sent_with: dict[str, int] = {}
    for frame in batch:
        ws.binary(frame) if isinstance(frame, bytes) else ws.text(frame)
        bad, event_id = expected_reader_error(frame)
        if bad:
            refused[event_id] = refused.get(event_id, 0) + 1
        with contextlib.suppress(Exception):
            eid = json.loads(frame)["event_id"]
            if isinstance(eid, str):
                sent_with[eid] = sent_with.get(eid, 0) + 1
    marker = f"sync-{next(_ids)}"
    ws.send({"type": "session.update", "session": {"instructions": marker}})
    seen = await ws.until(
        lambda e: e["type"] == "session.updated" and e["session"]["instructions"] == marker
    )
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert all(e["code"] != "internal_error" for e in errors), errors
    assert all(
        e["type"] == "invalid_request_error" or e["code"] == "input_backpressure" for e in errors
    ), errors
    by_id: dict[str | None, int] = {}
    for e in errors:
        if e["event_id"] is not None or e["code"] in READER_CODES:
            by_id[e["event_id"]] = by_id.get(e["event_id"], 0) + 1
    for event_id, count in by_id.items():  # at most one error per event
        if event_id is not None:
            assert count <= sent_with.get(event_id, 0), (event_id, batch, errors)
    for event_id, count in refused.items():  # exactly one for each refused frame
        if event_id is None:
            assert by_id.get(None, 0) == count, (batch, errors)
        else:
            assert by_id.get(event_id, 0) >= count, (event_id, batch, errors)
    assert ws.open
    assert runner.pending_bytes <= LIMIT and len(runner.turns) <= 2
    assert len(runner.history) <= 4 and runner.history_bytes <= 4096
    assert retained_bytes(runner) <= LIMIT + 2 * LIMIT + 4096  # pending + committed turns + history
    stats["frames"] += len(batch)
    stats["examples"] += 1
    stats["max_rss_mib"] = max(stats["max_rss_mib"], rss_mib())
    await ws.stop()
    await engine.close_session(runner.id)
