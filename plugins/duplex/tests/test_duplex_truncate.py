"""``conversation.item.truncate`` (issue 29): the user heard only part of a reply; the rest of its
text is cut from the history the model sees next turn."""

from __future__ import annotations

import json

import pytest
from duplex_helpers import of_type, until

from omni_duplex import protocol as P
from omni_duplex.client_events import ClientEventError, decode_frame

SECTION = (
    "{model: test-voice, max_sessions: 4, idle_ttl_s: 30, disconnect_grace_s: 0, "
    "cleanup_retry_s: 0.05, session_defaults: {turn_detection: null}}"
)


def test_the_wire_event_parses_and_bad_fields_are_named():
    (cmd,) = decode_frame(
        json.dumps(
            {
                "type": "conversation.item.truncate",
                "event_id": "e1",
                "item_id": "item_x",
                "content_index": 0,
                "audio_end_ms": 120,
            }
        ),
        1 << 20,
    )
    assert cmd == P.TruncateItem(item_id="item_x", content_index=0, audio_end_ms=120, event_id="e1")
    bad = {"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": -1}
    with pytest.raises(ClientEventError, match="'audio_end_ms'"):
        decode_frame(json.dumps(bad), 1 << 20)


async def reply(s) -> dict:
    s.send(P.AppendText(text="hello there", commit=True))
    s.send(P.CreateResponse())
    events = await until(s, of_type(P.RESPONSE_DONE))
    return events[-1].data


async def test_truncate_cuts_the_unheard_text_from_the_next_turns_context(duplex):
    engine = duplex(section=SECTION)
    s = await engine.open_session({"turn_detection": None})
    runner = engine.orchestrator.sessions.sessions[s.id]
    seen = []
    plan = runner.model.plan_response
    runner.model.plan_response = lambda ctx: (seen.append(ctx.history), plan(ctx))[1]
    done = await reply(s)
    text, audio_ms = done["text"], done["audio_ms"]
    assert len(text.split()) >= 4 and audio_ms > 0
    s.send(P.TruncateItem(item_id=done["item_id"], audio_end_ms=audio_ms // 2, event_id="t1"))
    events = await until(s, of_type(P.ITEM_TRUNCATED))
    assert events[-1].data == {
        "item_id": done["item_id"],
        "content_index": 0,
        "audio_end_ms": audio_ms // 2,
    }
    kept = runner.history[-1]["text"]
    assert kept and len(kept) < len(text) and text.startswith(kept)
    assert text.split()[: len(kept.split())] == kept.split()  # whole words only
    await reply(s)
    assert seen[-1][-1]["text"] == kept  # the next turn's model context has only what was heard
    assert sum(len(h["text"].encode()) for h in runner.history) == runner.history_bytes
    await s.close()


async def test_truncate_of_an_unknown_item_or_past_the_audio_is_one_error(duplex):
    engine = duplex(section=SECTION)
    s = await engine.open_session({"turn_detection": None})
    done = await reply(s)
    s.send(P.TruncateItem(item_id="nope", audio_end_ms=0, event_id="t2"))
    (err,) = [e for e in await until(s, of_type(P.ERROR))]
    assert err.data["code"] == "item_truncate_invalid_item_id" and "nope" in err.data["message"]
    s.send(P.TruncateItem(item_id=done["item_id"], audio_end_ms=done["audio_ms"] + 1))
    errs = await until(s, of_type(P.ERROR))
    assert "audio_end_ms" in errs[-1].data["message"]
    await s.close()
