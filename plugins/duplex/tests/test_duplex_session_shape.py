"""The Realtime ``session`` object in OpenAI's GA shape (issue 36 item 8): ``session.update``
takes GA's ``type`` / ``audio.input`` / ``audio.output`` as it takes the flat fields, and
``session.created`` / ``session.updated`` validate as the ``openai`` package's GA
``RealtimeSessionCreateRequest`` while keeping the flat fields earlier clients read. Scripted
stages; the official ``openai`` realtime client over a served socket."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from duplex_helpers import ToneModel, pipeline, register
from omni_core.testing.server import running_server
from openai.types.realtime import SessionCreatedEvent, SessionUpdatedEvent
from openai.types.realtime.realtime_session_create_request import RealtimeSessionCreateRequest

from omni_duplex import protocol as P
from omni_duplex.client_events import ClientEventError, commands_from_event
from omni_duplex.config import SessionConfig
from omni_duplex.errors import DuplexError
from omni_duplex.realtime import to_server_event
from omni_duplex.session_shape import check_voice

VAD = {"type": "server_vad", "silence_duration_ms": 300, "threshold": 0.4}


def changes(session: dict[str, Any]) -> dict[str, Any]:
    [cmd] = commands_from_event({"type": "session.update", "session": session})
    assert isinstance(cmd, P.UpdateSession)
    return cmd.session


def test_a_ga_session_update_means_what_the_flat_one_does():
    pcm = {"type": "audio/pcm", "rate": 24000}
    ga = {
        "type": "realtime",
        "instructions": "Be brief.",
        "output_modalities": ["text"],
        "max_output_tokens": "inf",
        "audio": {
            "input": {"format": pcm, "turn_detection": VAD},
            "output": {"format": pcm, "voice": "Bob", "speed": 1.0},
        },
        "tracing": None,  # GA fields this server does not use are ignored
    }
    flat = {
        "instructions": "Be brief.",
        "output_modalities": ["text"],
        "max_output_tokens": "inf",
        "turn_detection": VAD,
        "voice": "Bob",
    }
    assert (
        changes(ga)
        == changes(flat)
        == {
            "instructions": "Be brief.",
            "output_modalities": ["text"],
            "max_output_tokens": None,
            "turn_detection": {k: v for k, v in VAD.items()},
            "voice": "Bob",
        }
    )
    assert changes({"audio": {"output": {"voice": {"id": "Bob"}}}}) == {"voice": "Bob"}
    assert changes({"audio": {"output": {"voice": None}}}) == {"voice": None}


@pytest.mark.parametrize(
    ("session", "where"),
    [
        ({"type": "transcription"}, "'session.type' 'transcription'"),
        (
            {"audio": {"output": {"format": {"type": "audio/pcmu"}}}},
            "'session.audio.output.format'",
        ),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "input.format"),
        ({"audio": {"output": {"voice": 3}}}, "'session.audio.output.voice"),
    ],
)
def test_what_the_server_cannot_do_is_one_error_naming_the_field(session, where):
    with pytest.raises(ClientEventError) as info:
        changes(session)
    assert info.value.code in ("invalid_session_config", "invalid_event")
    assert where in info.value.message


def test_the_session_events_are_openais_ga_session_and_keep_the_flat_fields():
    config = SessionConfig.model_validate({"turn_detection": VAD, "max_output_tokens": 64})
    event = P.DuplexEvent(P.SESSION_UPDATED, "duplex-1", 0, {"session": config.public()}, 0.0)
    wire = to_server_event(event)
    ga = SessionUpdatedEvent.model_validate(wire).session
    assert isinstance(ga, RealtimeSessionCreateRequest) and ga.type == "realtime"
    assert ga.audio is not None and ga.audio.input is not None and ga.audio.output is not None
    assert ga.audio.input.format is not None and ga.audio.input.format.rate == 24000
    td = ga.audio.input.turn_detection
    assert td is not None and td.type == "server_vad" and td.silence_duration_ms == 300
    assert ga.audio.output.voice is None and ga.max_output_tokens == 64
    session = wire["session"]  # the flat fields, as before
    assert session["turn_detection"] == session["audio"]["input"]["turn_detection"]
    assert session["input_sample_rate_hz"] == 24000 and session["voice"] is None
    unlimited = SessionConfig.model_validate({}).public()
    wire = to_server_event(P.DuplexEvent(P.SESSION_CREATED, "d", 0, {"session": unlimited}, 0.0))
    assert wire["session"]["max_output_tokens"] == "inf"  # GA's word for no limit


class Voiced(ToneModel):
    voices = ("Ann", "Bob")


def test_a_voice_must_be_one_of_the_plugs():
    check_voice(Voiced(), SessionConfig(voice="Bob"))
    check_voice(ToneModel(), SessionConfig(voice=None))
    with pytest.raises(DuplexError, match="'Eve': model 'test-voice' has the voices Ann, Bob"):
        check_voice(Voiced(), SessionConfig(voice="Eve"))
    with pytest.raises(DuplexError, match="has one voice and none to choose"):
        check_voice(ToneModel(), SessionConfig(voice="alloy"))


@pytest.fixture
def served(fake_entry_points, monkeypatch):
    """The scripted duplex pipeline served; its plug has the voices Ann and Bob and records the
    session config each response was planned with."""
    register(fake_entry_points)
    monkeypatch.setattr(ToneModel, "voices", ("Ann", "Bob"))
    planned: list[SessionConfig] = []
    plan = ToneModel.plan_response

    def recording(self: Any, context: Any) -> Any:
        planned.append(context.session)
        return plan(self, context)

    monkeypatch.setattr(ToneModel, "plan_response", recording)
    with running_server(pipeline(), entry_points=True) as (base, _, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=30)
        yield client, planned


def recv(conn: Any) -> dict[str, Any]:
    return json.loads(conn.recv_bytes())


def test_the_official_client_reads_and_sets_the_ga_session(served):
    client, planned = served
    with client.realtime.connect(model="duplex-scripted") as conn:
        created = SessionCreatedEvent.model_validate(recv(conn))
        assert isinstance(created.session, RealtimeSessionCreateRequest)
        assert created.session.audio.input.turn_detection.silence_duration_ms == 500  # default
        conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {"input": {"turn_detection": VAD}, "output": {"voice": "Bob"}},
            }
        )
        raw = recv(conn)
        updated = SessionUpdatedEvent.model_validate(raw).session
        assert isinstance(updated, RealtimeSessionCreateRequest)
        assert updated.audio.input.turn_detection.silence_duration_ms == 300
        assert updated.audio.input.turn_detection.threshold == 0.4
        assert updated.audio.output.voice == "Bob" and updated.output_modalities == ["text"]
        assert raw["session"]["turn_detection"]["silence_duration_ms"] == 300  # flat, too
        conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": "alloy"}}})
        error = recv(conn)
        assert error["type"] == "error" and error["error"]["code"] == "invalid_session_config"
        assert error["error"]["message"] == (
            "'session.audio.output.voice': 'alloy': model 'test-voice' has the voices Ann, Bob"
        )
        conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hi"}],
            }
        )
        conn.response.create()
        while (event := recv(conn))["type"] != "response.done":
            assert event["type"] != "error", event
    assert [c.voice for c in planned] == ["Bob"]  # the refused update changed nothing
