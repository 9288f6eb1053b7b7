"""Streamed speech out on ``omni serve qwen3-omni``, with the official ``openai`` client (as
omni-qwen's test for ``qwen2.5-omni``): a streamed chat asking for text and audio gets its audio as
several deltas (base64 pcm16, 24 kHz: code2wav's streamed chunks, gap-free, the whole decode's
length) while the transcript is still coming, and the speech metrics are observed. The thinker is
held to ``TOKENS`` tokens (``min_tokens``) so that its reply outlasts the talker's first chunk of
frames (the tiny thinker on vLLM outruns the talker).

The speech contract on the same server: a seeded request speaks the same bytes twice (the seed
reaches the talker), a request sets its spoken length (``sampling_params.talker.max_tokens``,
bounded: a 400 naming the field), and a reply with nothing to speak still carries audio (a
zero-length WAV; streamed: an audio id), never ``message.audio: null``."""

from __future__ import annotations

import base64
import io
import itertools
import wave

import pytest
from omni_qwen3.pipelines import omni_pipeline

from omni_core.testing.speech import served_openai_client, streamed_speech

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

CHAT = [{"role": "user", "content": "Tell me about the sea."}]
TOKENS = 300
FRAME, LOOKAHEAD = 1920, 555  # samples per codec frame; code2wav's look-ahead (not voiced)


@pytest.fixture(scope="module")
def served(tiny_qwen3, qwen3_cache):
    with served_openai_client(omni_pipeline(), qwen3_cache) as (client, metrics):
        yield client, metrics


def test_a_streamed_chat_gets_pcm16_audio_deltas_while_the_transcript_comes(served):
    client, metrics = served
    # kinds: "audio" / "text", in arrival order
    kinds, pcm = streamed_speech(client, "qwen3-omni", "Ethan", TOKENS, CHAT)
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds)]
    assert kinds.count("audio") > 1, runs  # streamed: several chunks, not one WAV
    last_text = len(kinds) - 1 - kinds[::-1].index("text")
    assert "audio" in kinds[:last_text], runs  # speech while the transcript was still coming
    assert len(pcm) % 2 == 0 and (len(pcm) // 2 + LOOKAHEAD) % FRAME == 0  # whole frames
    assert metrics.registry.get_sample_value("omni_time_to_first_audio_seconds_count") >= 1
    assert metrics.registry.get_sample_value("omni_audio_rtf_count") >= 1


def spoken(client, **fields) -> tuple[bytes, int]:
    """A whole chat asking for text and WAV audio: the WAV's bytes and its sample count."""
    fields.setdefault("max_tokens", 8)
    reply = client.chat.completions.create(
        model="qwen3-omni",
        messages=CHAT,
        modalities=["text", "audio"],
        audio={"voice": "Ethan", "format": "wav"},
        **fields,
    )
    audio = reply.choices[0].message.audio
    assert audio is not None and audio.id and audio.expires_at, reply
    data = base64.b64decode(audio.data)
    with wave.open(io.BytesIO(data)) as wav:
        assert wav.getframerate() == 24000
        return data, wav.getnframes()


def test_a_seeded_request_speaks_the_same_bytes_twice(served):
    client, _ = served
    first, samples = spoken(client, seed=7)  # the talker samples (temperature 0.9)
    assert samples > 0 and spoken(client, seed=7)[0] == first
    assert spoken(client, seed=8)[0] != first


def test_a_request_sets_its_spoken_length_within_bounds(served):
    import openai

    client, _ = served
    greedy = {"temperature": 0.0}  # the tiny talker never says its eos: it talks to the cap
    _, default = spoken(client, extra_body={"sampling_params": {"talker": greedy}})
    longer = {"talker": {**greedy, "max_tokens": 80}}
    _, samples = spoken(client, extra_body={"sampling_params": longer})
    assert (default, samples) == (64 * FRAME - LOOKAHEAD, 80 * FRAME - LOOKAHEAD)
    too_long = {"sampling_params": {"talker": {"max_tokens": 4097}}}
    with pytest.raises(openai.BadRequestError) as bad:
        spoken(client, extra_body=too_long)
    assert "sampling_params.talker.max_tokens" in str(bad.value)
    assert bad.value.body["param"] == "sampling_params"
    with pytest.raises(openai.BadRequestError, match=r"sampling_params\.thinker"):
        spoken(client, extra_body={"sampling_params": {"thinker": {"max_tokens": 4}}})


def test_a_reply_with_nothing_to_speak_still_carries_audio(served):
    """A one-token reply gives the talker no frame (transformers has no text row for it): the
    response's audio is a zero-length WAV, and a streamed one still has its audio id."""
    client, _ = served
    _, samples = spoken(client, max_tokens=1)
    assert samples == 0
    stream = client.chat.completions.create(
        model="qwen3-omni",
        messages=CHAT,
        modalities=["text", "audio"],
        audio={"voice": "Ethan", "format": "pcm16"},
        max_tokens=1,
        stream=True,
    )
    ids = set()
    for chunk in stream:
        audio = chunk.choices[0].delta.audio if chunk.choices else None
        if audio is not None:
            ids.add(audio["id"] if isinstance(audio, dict) else audio.id)
    assert len(ids) == 1
