"""Session lifecycle, turn-taking and barge-in through the engine's public API (scripted stages)."""

from __future__ import annotations

import pytest
from duplex_helpers import (
    clip_ms,
    of_type,
    send_audio,
    silence,
    spoken,
    stage_running,
    tone,
    until,
)

from omni_duplex import protocol as P
from omni_duplex.engine import DuplexOmniEngine
from omni_duplex.errors import DuplexError


async def test_text_turn_streams_text_and_audio_then_close_cleans_up(duplex):
    engine = duplex()
    assert isinstance(engine, DuplexOmniEngine)
    session = await engine.open_session({"turn_detection": None})
    assert session.capabilities["max_sessions"] == 4
    assert session.session["turn_detection"] is None
    created = await session.recv()
    assert created.type == P.SESSION_CREATED and created.data["capabilities"]["barge_in"]

    session.send(P.AppendText(text="hi"))
    session.send(P.Commit(create_response=True))
    events = await until(session, of_type(P.RESPONSE_DONE))
    kinds = [e.type for e in events]
    assert kinds[:2] == [P.INPUT_COMMITTED, P.RESPONSE_CREATED]
    assert P.TEXT_DELTA in kinds and P.AUDIO_DELTA in kinds
    done = events[-1]
    assert done.data["status"] == "completed"
    text = "".join(e.data["delta"] for e in events if e.type == P.TEXT_DELTA)
    assert text == done.data["text"] and text.startswith("thinker:")
    assert done.data["audio_ms"] > 0

    await session.close()
    closed = await session.recv()
    assert closed.type == P.SESSION_CLOSED and closed.data["reason"] == "client_close"
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    assert engine.session_count() == 0
    with pytest.raises(DuplexError) as err:
        await session.recv()
    assert err.value.code == "session_closed"
    await session.close()  # idempotent


async def test_server_vad_detects_speech_commits_and_responds(duplex):
    engine = duplex()
    session = await engine.open_session({"turn_detection": {"silence_duration_ms": 200}})
    created = (await until(session, of_type(P.SESSION_CREATED)))[-1]
    assert created.data["session"]["turn_detection"]["vad"] == "silero"  # the default
    speech = spoken()
    send_audio(session, silence(200) + speech + silence(500))
    events = await until(session, of_type(P.RESPONSE_DONE))
    kinds = [e.type for e in events]
    assert kinds[:4] == [P.SPEECH_STARTED, P.SPEECH_STOPPED, P.INPUT_COMMITTED, P.RESPONSE_CREATED]
    started, stopped = events[0], events[1]
    # Silero scores 32 ms windows; the clip starts with 20 ms of near-silence
    assert 200 - 32 <= started.data["audio_start_ms"] <= 200 + 100
    end = 200 + clip_ms(speech)
    assert end - 100 <= stopped.data["audio_end_ms"] <= end + 200
    assert events[2].data["audio_ms"] >= clip_ms(speech) - 100
    assert events[-1].data["status"] == "completed"


async def test_energy_vad_detects_a_loud_tone_at_its_frame_times(duplex):
    engine = duplex()
    session = await engine.open_session(
        {"turn_detection": {"vad": "energy", "silence_duration_ms": 200}}
    )
    await until(session, of_type(P.SESSION_CREATED))
    send_audio(session, silence(200) + tone(400) + silence(300))
    events = await until(session, of_type(P.RESPONSE_DONE))
    kinds = [e.type for e in events]
    assert kinds[:4] == [P.SPEECH_STARTED, P.SPEECH_STOPPED, P.INPUT_COMMITTED, P.RESPONSE_CREATED]
    started, stopped = events[0], events[1]
    assert started.data["audio_start_ms"] == 200
    assert stopped.data["audio_end_ms"] == 600
    assert events[2].data["item_id"] == started.data["item_id"]
    assert events[2].data["audio_ms"] >= 400  # the speech (plus padding) was committed
    assert events[-1].data["status"] == "completed"


async def test_manual_commit_and_empty_commit(duplex):
    engine = duplex()
    session = await engine.open_session({"turn_detection": None})
    await until(session, of_type(P.SESSION_CREATED))
    session.send(P.Commit(event_id="c1"))
    err = (await until(session, of_type(P.ERROR)))[-1]
    assert err.data["code"] == "input_audio_buffer_commit_empty" and err.data["event_id"] == "c1"
    send_audio(session, tone(300))  # no VAD: no speech events, nothing happens until commit
    session.send(P.Commit())
    events = await until(session, of_type(P.INPUT_COMMITTED))
    assert [e.type for e in events] == [P.INPUT_COMMITTED]
    assert events[0].data["audio_ms"] == 300
    session.send(P.CreateResponse())
    session.send(P.CreateResponse(event_id="again"))
    events = await until(session, of_type(P.RESPONSE_DONE))
    errors = [e for e in events if e.type == P.ERROR]
    assert [e.data["code"] for e in errors] == ["conversation_already_has_active_response"]
    assert events[-1].data["status"] == "completed"


async def test_barge_in_cancels_before_anything_new_and_aborts_every_stage(duplex):
    engine = duplex(thinker="{num_tokens: 200, delay_s: 0.01}")
    session = await engine.open_session({"turn_detection": {"silence_duration_ms": 200}})
    await until(session, of_type(P.SESSION_CREATED))
    session.send(P.AppendText(text="tell me a long story"))
    session.send(P.Commit(create_response=True))
    first = await until(session, of_type(P.AUDIO_DELTA))  # the reply is playing
    old = next(e for e in first if e.type == P.RESPONSE_CREATED).data["response_id"]
    assert len(await stage_running(engine)) >= 1

    send_audio(session, spoken() + silence(500))  # the user speaks over it
    events = await until(
        session, lambda e: e.type == P.RESPONSE_DONE and e.data["response_id"] != old
    )
    kinds = [e.type for e in events]
    i_start = kinds.index(P.SPEECH_STARTED)
    i_cancel = next(i for i, e in enumerate(events) if e.type == P.RESPONSE_DONE)
    assert events[i_cancel].data == {
        **events[i_cancel].data,
        "response_id": old,
        "status": "cancelled",
        "reason": "turn_detected",
    }
    assert i_start < i_cancel
    # what was already spoken is kept in the cancelled terminal
    said = "".join(e.data["delta"] for e in first + events[:i_cancel] if e.type == P.TEXT_DELTA)
    assert events[i_cancel].data["text"] == said and said
    # nothing of the old response (or the old epoch) after its terminal
    after = events[i_cancel + 1 :]
    assert all(e.data.get("response_id") != old for e in after)
    assert all(e.epoch == 1 for e in after)
    assert events[i_cancel].epoch == 0
    new_created = next(e for e in after if e.type == P.RESPONSE_CREATED)
    assert after.index(new_created) > kinds.index(P.SPEECH_STOPPED) - i_cancel - 1
    # the old request is gone from every stage (thinker, talker, vocoder)
    assert all(not r.startswith(session.id + ".e0") for r in await stage_running(engine))
    await session.close()
    await until(session, of_type(P.SESSION_CLOSED))
    assert await stage_running(engine) == []


async def test_client_cancel_and_cancel_without_response(duplex):
    engine = duplex(thinker="{num_tokens: 200, delay_s: 0.01}")
    session = await engine.open_session({"turn_detection": None})
    await until(session, of_type(P.SESSION_CREATED))
    session.send(P.CancelResponse(event_id="x"))
    err = (await until(session, of_type(P.ERROR)))[-1]
    assert err.data["code"] == "response_cancel_not_active"
    session.send(P.AppendText(text="go"))
    session.send(P.Commit(create_response=True))
    await until(session, of_type(P.TEXT_DELTA))
    session.send(P.CancelResponse())
    done = (await until(session, of_type(P.RESPONSE_DONE)))[-1]
    assert (done.data["status"], done.data["reason"]) == ("cancelled", "client_cancelled")
    session.send(P.AppendText(text="again"))
    session.send(P.Commit(create_response=True))
    events = await until(session, of_type(P.RESPONSE_DONE))
    assert all(e.epoch == 1 for e in events)
    assert engine.request_tables()["runs"] <= 1


async def test_session_update_and_clear(duplex):
    engine = duplex()
    session = await engine.open_session({"turn_detection": None})
    await until(session, of_type(P.SESSION_CREATED))
    session.send(
        P.UpdateSession(session={"output_modalities": ["text"], "instructions": "be brief"})
    )
    updated = (await until(session, of_type(P.SESSION_UPDATED)))[-1]
    assert updated.data["session"]["output_modalities"] == ["text"]
    session.send(P.UpdateSession(session={"output_modalities": ["smell"]}, event_id="bad"))
    err = (await until(session, of_type(P.ERROR)))[-1]
    assert err.data["code"] == "invalid_session_config" and err.data["event_id"] == "bad"
    send_audio(session, tone(100))
    session.send(P.ClearInput())
    await until(session, of_type(P.INPUT_CLEARED))
    session.send(P.Commit())
    assert (await until(session, of_type(P.ERROR)))[-1].data[
        "code"
    ] == "input_audio_buffer_commit_empty"
    session.send(P.AppendText(text="x"))
    session.send(P.Commit(create_response=True))
    events = await until(session, of_type(P.RESPONSE_DONE))
    assert not any(e.type == P.AUDIO_DELTA for e in events)  # text only now
    assert any(e.type == P.TEXT_DELTA for e in events)
