"""``POST /v1/audio/speech`` on ``omni serve qwen3-tts`` with the official ``openai`` client: a
WAV, the same bytes for the same seed, audio streamed as it is decoded (its first bytes before
half the request's time), SSE events, FLAC, and 400s naming the field."""

from __future__ import annotations

import base64
import json
import time

import pytest
from omni_qwen3_tts.pipelines import tts_pipeline

from omni_core.testing.speech import served_openai_client

pytestmark = pytest.mark.timeout(600)

FRAME = 1920  # samples per 12.5 Hz frame
TEXT = "hello world, read the news today please"


@pytest.fixture(scope="module")
def served(tiny_tts, built_model):
    with served_openai_client(tts_pipeline(), built_model.cache) as (client, metrics):
        yield client, metrics


@pytest.fixture(scope="module")
def client(served):
    return served[0]


def speech(client, **fields):
    fields.setdefault("model", "qwen3-tts")
    fields.setdefault("input", TEXT)
    fields.setdefault("voice", "ryan")
    return client.audio.speech.create(**fields)


def pcm_of_wav(data: bytes) -> bytes:
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
    assert int.from_bytes(data[24:28], "little") == 24000  # sample rate
    return data[44:]


def test_a_seeded_wav_is_whole_frames_and_repeats(client):
    first = speech(client, response_format="wav", extra_body={"seed": 3, "max_new_tokens": 20})
    pcm = pcm_of_wav(first.content)
    assert len(pcm) > 0 and len(pcm) % (2 * FRAME) == 0 and len(pcm) // (2 * FRAME) <= 20
    again = speech(client, response_format="wav", extra_body={"seed": 3, "max_new_tokens": 20})
    assert again.content == first.content
    other = speech(client, response_format="wav", extra_body={"seed": 4, "max_new_tokens": 20})
    assert other.content != first.content


def test_streamed_audio_starts_before_half_the_request(client):
    """The first bytes arrive well before the end (the decoder streams 4-frame chunks while the
    talker goes on); a ratio of the same request's own times, not a timing threshold."""
    started = time.perf_counter()
    first_at, total = None, b""
    with client.audio.speech.with_streaming_response.create(
        model="qwen3-tts", input=TEXT, voice="ryan", response_format="pcm",
        extra_body={"seed": 1, "max_new_tokens": 64},
    ) as response:  # fmt: skip
        assert response.headers["content-type"].startswith("audio/pcm")
        for chunk in response.iter_bytes():
            if chunk and first_at is None:
                first_at = time.perf_counter() - started
            total += chunk
    whole = time.perf_counter() - started
    assert len(total) % (2 * FRAME) == 0 and len(total) // (2 * FRAME) >= 16
    assert first_at is not None and first_at < whole / 2


def test_sse_events_carry_the_audio_then_done(client):
    with client.audio.speech.with_streaming_response.create(
        model="qwen3-tts", input=TEXT, voice="vivian", response_format="pcm",
        stream_format="sse", extra_body={"seed": 2, "max_new_tokens": 12},
    ) as response:  # fmt: skip
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    types = [e["type"] for e in events]
    assert types[-1] == "speech.audio.done" and types.count("speech.audio.delta") > 1
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    plain = speech(client, response_format="pcm", voice="vivian",
                   extra_body={"seed": 2, "max_new_tokens": 12})  # fmt: skip
    assert pcm == plain.content


def test_flac_and_an_openai_voice_name(client, tmp_path):
    import soundfile

    reply = speech(client, voice="alloy", response_format="flac", extra_body={"max_new_tokens": 8})
    path = tmp_path / "a.flac"
    path.write_bytes(reply.content)
    samples, rate = soundfile.read(path)
    assert rate == 24000 and len(samples) % FRAME == 0 and len(samples) > 0


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"voice": "nobody"}, "voice", "available: aiden, dylan, ryan, vivian"),
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "   "}, "input", "empty"),
        ({"response_format": "mp3"}, "response_format", "no encoder"),
        ({"speed": 1.5}, "speed", "1.0 only"),
        ({"extra_body": {"language": "klingon"}}, "language", "unknown language"),
        ({"extra_body": {"task_type": "VoiceDesign"}}, "task_type", "custom_voice"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(client, fields, param, message):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        speech(client, **fields)
    error = info.value.body
    assert error["param"] == param and message in error["message"]


def test_speech_is_observed_by_the_shared_speech_metrics(served):
    client, metrics = served
    before = metrics.registry.get_sample_value("omni_time_to_first_audio_seconds_count") or 0
    speech(client, response_format="pcm", extra_body={"seed": 1, "max_new_tokens": 8})
    after = metrics.registry.get_sample_value("omni_time_to_first_audio_seconds_count") or 0
    assert after == before + 1
    assert (metrics.registry.get_sample_value("omni_audio_rtf_count") or 0) >= 1
