"""Chat with audio output through ``omni serve`` (OpenAI's shapes, whole and streamed), the voice
reaching every stage as ``params.extra["voice"]``, and the 400s of audio requests: on the voice
kit's pipeline (tests/serve/voice_kit.py), no model needed."""

from __future__ import annotations

import base64
import io
import wave

import httpx
import numpy as np
import openai
import pytest

from tests.serve.conftest import running_server
from tests.serve.voice_kit import KIT, PIPELINE, RATE, SAMPLES_PER_TOKEN, TEXT_ONLY, plugin

CHAT = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def server():
    with running_server(PIPELINE, plugins=[("voice-kit", plugin())]) as running:
        yield running


@pytest.fixture
def client(server):
    KIT.seen.clear()
    KIT.admit = False
    yield openai.OpenAI(base_url=f"{server[0]}/v1", api_key="x", max_retries=0)
    KIT.admit = False


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def post(server, body: dict) -> httpx.Response:
    body = {"model": "voice-test", "messages": CHAT, **body}
    return httpx.post(f"{server[0]}/v1/chat/completions", json=body, timeout=30)


def test_whole_reply_has_a_wav_in_the_voice_asked_for(client):
    reply = client.chat.completions.create(
        model="voice-test",
        modalities=["text", "audio"],
        audio={"voice": "Ethan", "format": "wav"},
        messages=CHAT,
    )
    message = reply.choices[0].message
    assert message.content and message.audio.transcript == message.content
    assert message.audio.id.startswith("audio-") and message.audio.expires_at > 0
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (RATE, 1, 2)
        samples = pcm(wav.readframes(wav.getnframes()))
    audio_tokens = reply.usage.completion_tokens_details.audio_tokens
    assert audio_tokens > 0 and samples.size == audio_tokens * SAMPLES_PER_TOKEN
    assert np.all(samples == int(0.3 * 32767))  # Ethan, the kit's second voice, speaks at 0.3
    text_tokens = reply.usage.completion_tokens - audio_tokens
    assert text_tokens == message.content.count("thinker:")
    # the voice reached every stage, the ones that do not speak included
    for stage in ("thinker", "talker", "speaker"):
        assert [e.get("voice") for e in KIT.extras(stage)] == ["Ethan"], stage


def test_pcm16_whole_reply_is_the_same_samples_without_a_header(client):
    def audio(fmt: str) -> bytes:
        reply = client.chat.completions.create(
            model="voice-test",
            modalities=["text", "audio"],
            audio={"voice": "Chelsie", "format": fmt},
            messages=CHAT,
            seed=1,
        )
        return base64.b64decode(reply.choices[0].message.audio.data)

    raw, wav_file = audio("pcm16"), audio("wav")
    assert raw and wav_file[:4] == b"RIFF" and wav_file.endswith(raw)
    assert np.all(pcm(raw) == int(0.2 * 32767))


def test_audio_alone_keeps_the_transcript_and_no_content(client):
    reply = client.chat.completions.create(
        model="voice-test",
        modalities=["audio"],
        audio={"voice": "Chelsie", "format": "wav"},
        messages=CHAT,
    )
    message = reply.choices[0].message
    assert message.content is None and message.audio.transcript.count("thinker:") == 4
    assert reply.usage.completion_tokens > reply.usage.completion_tokens_details.audio_tokens


def test_without_audio_params_the_stages_get_no_voice(client):
    reply = client.chat.completions.create(
        model="voice-test", modalities=["text", "audio"], messages=CHAT, n=2
    )
    assert len(reply.choices) == 2
    ids = {c.message.audio.id for c in reply.choices}
    assert len(ids) == 2  # one audio per choice
    for choice in reply.choices:
        samples = pcm(base64.b64decode(choice.message.audio.data)[44:])
        assert samples.size and np.all(samples == int(0.1 * 32767))  # the stage's default
    assert all("voice" not in extra for _, _, extra in KIT.seen)


def test_streamed_audio_pieces_add_up_to_the_whole_reply(client):
    def ask(stream: bool):
        return client.chat.completions.create(
            model="voice-test",
            modalities=["text", "audio"],
            audio={"voice": "Ethan", "format": "wav"},
            messages=CHAT,
            stream=stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        )

    whole = ask(False)
    chunks = list(ask(True))
    pieces = [c.choices[0].delta.audio for c in chunks if c.choices and c.choices[0].delta.audio]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    data = b"".join(base64.b64decode(p.data) for p in pieces)
    transcript = "".join(p.transcript for p in pieces)
    assert {p.id for p in pieces} == {pieces[0].id} and pieces[0].id.startswith("audio-")
    assert data == base64.b64decode(whole.choices[0].message.audio.data)[44:]  # pcm16 pieces
    assert transcript == content == whole.choices[0].message.content
    # the last piece only says when the audio expires; the closing chunk then finishes
    assert pieces[-1].expires_at and not pieces[-1].data and not pieces[-1].transcript
    assert [p.expires_at for p in pieces[:-1]] == [None] * (len(pieces) - 1)
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["stop"]
    assert chunks[-1].usage.completion_tokens_details.audio_tokens == (
        whole.usage.completion_tokens_details.audio_tokens
    )
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_audio_alone_sends_the_text_as_transcript_only(client):
    chunks = list(
        client.chat.completions.create(
            model="voice-test",
            modalities=["audio"],
            audio={"voice": "Ethan", "format": "pcm16"},
            messages=CHAT,
            stream=True,
        )
    )
    deltas = [c.choices[0].delta for c in chunks]
    assert all(not d.content for d in deltas)
    assert "".join(d.audio.transcript or "" for d in deltas if d.audio).count("thinker:") == 4


def test_bad_audio_requests_are_400_naming_the_field(server, client):
    cases = [
        ({"audio": {"voice": "Ethan", "format": "wav"}}, "audio", "'modalities' includes"),
        (
            {"modalities": ["text"], "audio": {"voice": "Ethan", "format": "wav"}},
            "audio",
            "'audio' is only allowed",
        ),
        (
            {"modalities": ["text", "video"]},
            "modalities",
            "'modalities[1]': Input should be 'text' or 'audio'",
        ),
        (
            {"modalities": ["audio"], "audio": {"voice": "Ethan", "format": "mp3"}},
            "audio",
            "'audio.format': Input should be 'wav' or 'pcm16'",
        ),
        ({"modalities": ["audio"], "audio": {"voice": "", "format": "wav"}}, "audio", "voice"),
        ({"modalities": []}, "modalities", "'modalities'"),
    ]
    for body, param, fragment in cases:
        r = post(server, body)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert error["param"] == param and fragment in error["message"], (body, error)
        assert error["type"] == "invalid_request_error"
    assert KIT.seen == []  # none of them reached a stage


def test_unknown_voice_is_the_speaking_stages_400_and_the_engine_stays_up(server, client):
    r = post(server, {"modalities": ["text", "audio"], "audio": {"voice": "Nobody"}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "UnknownVoiceError"
    assert error["message"] == (
        "stage 'speaker': unknown voice 'Nobody' (voices: ['Chelsie', 'Ethan'])"
    )
    with pytest.raises(openai.BadRequestError, match="unknown voice 'Nobody'"):
        client.chat.completions.create(
            model="voice-test",
            modalities=["audio"],
            audio={"voice": "Nobody", "format": "wav"},
            messages=CHAT,
        )
    assert post(server, {"modalities": ["audio"], "audio": {"voice": "Chelsie"}}).status_code == 200
    assert server[1].num_active_requests == 0


def test_unknown_voice_streamed_is_an_error_event_unless_refused_at_admission(server, client):
    body = {"modalities": ["text", "audio"], "audio": {"voice": "Nobody"}, "stream": True}
    # the speaking stage sees the voice after the text stage's first output went out: the
    # stream is a 200 whose last event before [DONE] is the error
    r = post(server, body)
    assert r.status_code == 200
    events = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert "unknown voice 'Nobody'" in events[-2] and '"error"' in events[-2]
    assert events[-1] == "data: [DONE]"
    # a plugin that checks voices in omni_admit_request makes it a 400 before the 200
    KIT.admit = True
    r = post(server, body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "unknown voice 'Nobody' (voices: ['Chelsie', 'Ethan'])"
    assert post(server, {**body, "audio": {"voice": "Ethan"}}).status_code == 200


def test_audio_from_a_pipeline_without_audio_is_400_saying_why():
    with running_server(TEXT_ONLY) as (base, _, _):
        body = {"model": "text-only", "messages": CHAT, "modalities": ["text", "audio"]}
        r = httpx.post(f"{base}/v1/chat/completions", json=body)
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["param"] == "modalities"
        assert error["message"] == (
            "modalities ['text', 'audio']: model 'text-only' cannot produce audio: no final "
            "stage of the pipeline outputs it (final stages: 'thinker' (text))"
        )
        body["audio"] = {"voice": "Ethan", "format": "wav"}
        body["stream"] = True
        assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 400
        c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="cannot produce audio"):
            c.chat.completions.create(model="text-only", modalities=["audio"], messages=CHAT)


def test_request_extra_merges_over_each_stages_pipeline_extra(make_engine, fake_entry_points):
    import asyncio

    from omni_core.errors import RequestError

    fake_entry_points.add("voice-kit", plugin())
    pipeline = PIPELINE.replace(
        "voices: [Chelsie, Ethan]}",
        "voices: [Chelsie, Ethan]}, sampling_params: {extra: {voice: Chelsie, keep: 1}}",
    )
    engine = make_engine(pipeline)
    defaults = engine.request_params()
    assert defaults["speaker"].extra == {"voice": "Chelsie", "keep": 1}  # the pipeline's voice
    params = engine.request_params({"thinker": {"max_tokens": 2}}, extra={"voice": "Ethan"})
    assert params["speaker"].extra == {"voice": "Ethan", "keep": 1}  # the request's wins
    assert params["thinker"].extra == {"voice": "Ethan"} and params["thinker"].max_tokens == 2
    with pytest.raises(RequestError, match="extra must be a mapping"):
        engine.request_params(extra=["voice"])

    async def speak(sampling_params):
        KIT.seen.clear()
        outs = [o async for o in engine.generate("hi", sampling_params=sampling_params)]
        return np.concatenate([o.payload.samples for o in outs if o.payload is not None])

    assert np.all(asyncio.run(speak(None)) == np.float32(0.2))  # Chelsie, from the pipeline
    assert np.all(asyncio.run(speak(params)) == np.float32(0.3))  # Ethan, from the request
    assert [e["voice"] for e in KIT.extras("talker")] == ["Ethan"]
