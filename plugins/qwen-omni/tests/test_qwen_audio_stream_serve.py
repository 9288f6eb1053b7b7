"""Real-time speech out on ``omni serve qwen2.5-omni`` (issue 27), with the official ``openai``
client: a streamed chat asking for text and audio gets its audio deltas (base64 pcm16, 24 kHz)
while the transcript is still coming, the speech metrics are observed, and a non-streamed chat
still gets one whole WAV. The thinker is held to ``TOKENS`` tokens (``min_tokens``), the talker
follows it a token behind, token2wav voices its first chunk after 36 codes (the pipeline's 12 +
24 of right context): the tiny thinker on vLLM outruns the talker, so its reply must be long
enough for the talker's first 36 codes to be voiced before it ends.

A seeded request speaks the same bytes twice: the request's seed reaches the talker (its codes)
and token2wav (its DiT noise), not the thinker alone. A one-token reply (no code: the talker has
no text row for it) still carries audio, a zero-length WAV, never ``message.audio: null``."""

from __future__ import annotations

import base64
import io
import itertools
import wave

import pytest
from omni_qwen.pipelines import omni_pipeline

from omni_core.testing.speech import served_openai_client, streamed_speech

CHAT = [{"role": "user", "content": "Tell me about the sea."}]
TOKENS = 450  # measured (loaded 2-core machine): first audio 0.9 s, last transcript 2.3 s


@pytest.fixture(scope="module")
def served(tiny_qwen, qwen_cache):
    with served_openai_client(omni_pipeline(), qwen_cache) as (client, metrics):
        yield client, metrics


def test_audio_deltas_arrive_before_the_last_transcript_delta(served):
    client, metrics = served
    # kinds: "audio" / "text", in arrival order
    kinds, pcm = streamed_speech(client, "qwen2.5-omni", "Chelsie", TOKENS, CHAT)
    last_text = len(kinds) - 1 - kinds[::-1].index("text")
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds)]
    assert "audio" in kinds[:last_text], runs  # speech while the transcript was still coming
    assert kinds.count("audio") > 1 and len(pcm) % 2 == 0
    assert metrics.registry.get_sample_value("omni_time_to_first_audio_seconds_count") >= 1
    assert metrics.registry.get_sample_value("omni_audio_rtf_count") >= 1


def test_a_seeded_request_speaks_the_same_bytes_twice(served):
    client, _ = served

    def wav(seed: int) -> bytes:
        reply = client.chat.completions.create(
            model="qwen2.5-omni",
            messages=CHAT,
            modalities=["text", "audio"],
            audio={"voice": "Chelsie", "format": "wav"},
            max_tokens=8,
            seed=seed,
        )
        audio = reply.choices[0].message.audio
        assert audio is not None, reply
        return base64.b64decode(audio.data)

    first = wav(7)  # the talker samples (temperature 0.9), token2wav draws noise
    assert len(first) > 44 and wav(7) == first
    assert wav(8) != first


def test_a_reply_with_nothing_to_speak_still_carries_audio(served):
    client, _ = served
    reply = client.chat.completions.create(
        model="qwen2.5-omni",
        messages=CHAT,
        modalities=["text", "audio"],
        audio={"voice": "Chelsie", "format": "wav"},
        max_tokens=1,
    )
    audio = reply.choices[0].message.audio
    assert audio is not None and audio.id and audio.expires_at, reply
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as wav:
        assert (wav.getframerate(), wav.getnframes()) == (24000, 0)
