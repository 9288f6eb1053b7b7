"""Hardening of ``/v1/realtime`` (issue 24): every malformed client event gets one ``error`` event
and the socket stays open; typed text, history and frames are bounded; idle sessions close."""

from __future__ import annotations

import base64
import json

from duplex_helpers import Refusing, of_type, until
from fake_socket import FakeSocket

from omni_duplex import protocol as P

SECTION = (
    "{model: test-voice, max_sessions: 8, max_pending_input_bytes: 16384, max_pending_turns: 2, "
    "max_event_bytes: 65536, max_history_turns: 4, max_history_bytes: 8192, idle_ttl_s: 30, "
    "disconnect_grace_s: 0, cleanup_retry_s: 0.05, session_defaults: {turn_detection: null}}"
)


def item(text, event_id=None):
    event = {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        },
    }
    return {**event, "event_id": event_id} if event_id else event


# (name, frame: str | bytes, the error's event_id, a word its message must contain)
MALFORMED = [
    ("not JSON", "not json{", None, "JSON"),
    ("binary frame", b"\x00\x01binary", None, "binary"),
    ("JSON, not an object", "[1, 2]", None, "object"),
    ("no type", json.dumps({"event_id": "e4"}), "e4", "'type'"),
    ("type not a string", json.dumps({"type": 5, "event_id": "e5"}), "e5", "'type'"),
    ("unknown type", json.dumps({"type": "nope", "event_id": "e6"}), "e6", "nope"),
    ("item not an object", json.dumps({**item("x", "e7"), "item": "hi"}), "e7", "'item'"),
    (
        "content not a list",
        json.dumps({**item("x", "e8"), "item": {"role": "user", "content": 5}}),
        "e8",
        "'item.content'",
    ),
    ("text not a string", json.dumps(item(5, "e9")), "e9", "'item.content.0.text'"),
    (
        "session.audio not an object",
        json.dumps({"type": "session.update", "event_id": "e10", "session": {"audio": "x"}}),
        "e10",
        "'session.audio'",
    ),
    (
        "session not an object",
        json.dumps({"type": "session.update", "event_id": "e11", "session": 5}),
        "e11",
        "'session'",
    ),
    (
        "invalid base64 audio",
        json.dumps({"type": "input_audio_buffer.append", "event_id": "e12", "audio": "!!!"}),
        "e12",
        "'audio'",
    ),
    (
        "audio not a string",
        json.dumps({"type": "input_audio_buffer.append", "event_id": "e13", "audio": 5}),
        "e13",
        "'audio'",
    ),
    (
        "odd-length pcm16",
        json.dumps(
            {
                "type": "input_audio_buffer.append",
                "event_id": "e14",
                "audio": base64.b64encode(b"abc").decode(),
            }
        ),
        "e14",
        "even",
    ),
    (
        "response not an object",
        json.dumps({"type": "response.create", "event_id": "e15", "response": "x"}),
        "e15",
        "'response'",
    ),
    (
        "unknown field",
        json.dumps({"type": "response.cancel", "event_id": "e16", "bogus": 1}),
        "e16",
        "'bogus'",
    ),
    (
        "event_id not a string",
        json.dumps({"type": "response.cancel", "event_id": 7}),
        None,
        "event_id",
    ),
    ("nested too deeply", "[" * 20_000 + "]" * 20_000, None, "deeply"),
    (
        "integer past the digit limit",
        '{"type": "response.create", "x": ' + "1" * 5000 + "}",
        None,
        "JSON",
    ),
    ("oversize frame", json.dumps(item("x" * 70_000, "e20")), None, "max_event_bytes"),
]


async def test_every_malformed_event_gets_one_error_and_the_socket_stays(duplex):
    engine = duplex(section=SECTION)
    ws = FakeSocket().start(engine)
    assert (await ws.recv())["type"] == "session.created"
    for name, frame, event_id, word in MALFORMED:
        if isinstance(frame, bytes):
            ws.binary(frame)
        else:
            ws.text(frame)
        event = await ws.recv()
        assert event["type"] == "error", name
        error = event["error"]
        assert error["type"] == "invalid_request_error", (name, error)
        assert error["event_id"] == event_id, (name, error)
        assert word in error["message"], (name, error)
        assert ws.open, f"{name}: the socket was closed"
    assert ws.sent.empty()  # exactly one event each
    ws.send(item("still here"))
    ws.send({"type": "response.create"})
    done = (await ws.until(lambda e: e["type"] == "response.done"))[-1]
    assert done["response"]["status"] == "completed"
    await ws.stop()


async def test_typed_text_past_the_limits_is_refused_whole(duplex):
    engine = duplex(section=SECTION)
    ws = FakeSocket().start(engine)
    await ws.recv()
    runner = next(iter(engine.orchestrator.sessions.sessions.values()))
    big = "x" * 6000  # two fit max_pending_input_bytes (16384), a third does not
    for i in range(6):  # past max_pending_turns (2) without a response
        ws.send(item(big, f"t{i}"))
    ws.send(item("y" * 20_000, "huge"))  # more than max_pending_input_bytes at once
    ws.send({"type": "session.update", "session": {"instructions": "sync"}})  # applied in order
    seen = await ws.until(lambda e: e["type"] == "session.updated")
    errors = {e["error"]["event_id"]: e["error"] for e in seen if e["type"] == "error"}
    committed = [e for e in seen if e["type"] == "input_audio_buffer.committed"]
    assert len(committed) == 2
    assert {k: v["code"] for k, v in errors.items()} == {
        "t2": "input_backpressure",
        "t3": "input_backpressure",
        "t4": "input_backpressure",
        "t5": "input_backpressure",
        "huge": "input_too_large",
    }
    assert all("max_pending_" in errors[f"t{i}"]["message"] for i in range(2, 6))
    assert errors["t2"]["retryable"] and not errors["huge"]["retryable"]
    assert "max_pending_input_bytes" in errors["huge"]["message"]
    # nothing of a refused item was kept
    assert runner.text_parts == [] and runner.pending_bytes == 0 and len(runner.turns) == 2
    await ws.stop()


async def test_history_keeps_the_newest_turns_within_bytes_and_turns(duplex):
    engine = duplex(section=SECTION)
    s = await engine.open_session({"turn_detection": None})
    runner = engine.orchestrator.sessions.sessions[s.id]
    deleted = []
    for i in range(4):  # 8 items (user + assistant) past max_history_turns 4
        s.send(P.AppendText(text=f"turn {i}", commit=True))
        s.send(P.CreateResponse())
        events = await until(s, of_type(P.RESPONSE_DONE))
        deleted += [e.data["item_id"] for e in events if e.type == P.ITEM_DELETED]
    assert len(runner.history) == 4 and [h["text"] for h in runner.history][0::2] == [
        "turn 2",
        "turn 3",
    ]
    s.send(P.AppendText(text="z" * 9000, commit=True))  # alone over max_history_bytes (8192)
    s.send(P.CreateResponse())
    events = await until(s, of_type(P.RESPONSE_DONE))
    deleted += [e.data["item_id"] for e in events if e.type == P.ITEM_DELETED]
    assert runner.history_bytes <= 8192 and len(runner.history) <= 4
    assert sum(len(h["text"].encode()) for h in runner.history) == runner.history_bytes
    assert len(deleted) >= 4 + 4 and len(set(deleted)) == len(deleted)
    await s.close()


async def test_an_idle_connection_is_closed_after_idle_ttl(duplex):
    engine = duplex(section=SECTION.replace("idle_ttl_s: 30", "idle_ttl_s: 0.3"))
    ws = FakeSocket().start(engine)
    events = await ws.until(lambda e: e["type"] == "session.expired", timeout=5)
    assert [e["type"] for e in events] == ["session.created", "session.expired"]
    assert events[-1]["reason"] == "idle_timeout"
    await ws.task
    assert ws.close_code == 1000 and engine.session_count() == 0


async def test_a_refused_turn_fails_alone_and_later_turns_work(duplex):
    """Issue 34 item 3: a turn the stage refuses (too long) is one error and a failed response;
    it leaves the conversation (``conversation.item.deleted``), so the next turn ("hi") is not
    refused again for it, and the earlier turns stay."""
    engine = duplex(section=SECTION)
    refusing = Refusing(engine)
    s = await engine.open_session({"turn_detection": None})
    ask = [("hello", "completed"), ("x" * 500, "failed"), ("hi", "completed")]
    seen = []
    for text, status in ask:
        s.send(P.AppendText(text=text, commit=True))
        s.send(P.CreateResponse())
        events = await until(s, of_type(P.RESPONSE_DONE))
        assert events[-1].data["status"] == status, (text, events[-1].data)
        seen.append(events)
    errors = [e for e in seen[1] if e.type == P.ERROR]
    assert len(errors) == 1 and errors[0].data["code"] == "input_rejected", errors
    (long_item,) = [e.data["item_id"] for e in seen[1] if e.type == P.INPUT_COMMITTED]
    deleted = [e.data for e in seen[1] if e.type == P.ITEM_DELETED]
    assert deleted == [{"item_id": long_item, "reason": "input_rejected"}]
    assert not any(e.type == P.ERROR for e in seen[2])
    assert refusing.plans[-1][0] == "hello" and refusing.plans[-1][-1] == "hi"
    assert all(len(t) <= 100 for t in refusing.plans[-1])
    await s.close()


async def test_cancelled_responses_leave_no_empty_items(duplex):
    """Issue 34 item 3: a response cancelled before it said anything adds nothing to the
    history (200 create/cancel pairs filled it with empty replies, pushing real turns out)."""
    engine = duplex(section=SECTION, thinker="{num_tokens: 6, delay_s: 0.05}")
    s = await engine.open_session({"turn_detection": None})
    runner = engine.orchestrator.sessions.sessions[s.id]
    s.send(P.AppendText(text="keep me", commit=True))
    for _ in range(6):  # more than max_history_turns (4)
        s.send(P.CreateResponse())
        s.send(P.CancelResponse())
        done = (await until(s, of_type(P.RESPONSE_DONE)))[-1].data
        assert done["status"] == "cancelled" and done["text"] == "", done
    assert [(h["role"], h["text"]) for h in runner.history] == [("user", "keep me")]
    await s.close()
