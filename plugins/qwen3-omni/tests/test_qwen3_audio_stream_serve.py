"""Streamed speech out on ``omni serve qwen3-omni``, with the official ``openai`` client (as
omni-qwen's test for ``qwen2.5-omni``): a streamed chat asking for text and audio gets its audio as
several deltas (base64 pcm16, 24 kHz: code2wav's streamed chunks, gap-free, the whole decode's
length) while the transcript is still coming, and the speech metrics are observed. The thinker is
held to ``TOKENS`` tokens (``min_tokens``) so that its reply outlasts the talker's first chunk of
frames (the tiny thinker on vLLM outruns the talker)."""

from __future__ import annotations

import itertools

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
