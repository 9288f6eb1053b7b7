"""Streamed speech out on ``omni serve qwen3-omni``, with the official ``openai`` client (as
omni-qwen's test for ``qwen2.5-omni``): a streamed chat asking for text and audio gets its audio as
several deltas (base64 pcm16, 24 kHz: code2wav's streamed chunks, gap-free, the whole decode's
length) while the transcript is still coming, and the speech metrics are observed. The thinker is
held to ``TOKENS`` tokens (``min_tokens``) so that its reply outlasts the talker's first chunk of
frames (the tiny thinker on vLLM outruns the talker)."""

from __future__ import annotations

import base64
import itertools

import openai
import pytest
from omni_qwen3.pipelines import omni_pipeline

from omni_core import OmniSettings
from omni_core.testing.server import running_server

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

CHAT = [{"role": "user", "content": "Tell me about the sea."}]
TOKENS = 300
FRAME, LOOKAHEAD = 1920, 555  # samples per codec frame; code2wav's look-ahead (not voiced)


@pytest.fixture(scope="module")
def served(tiny_qwen3, qwen3_cache):
    settings = OmniSettings(cache_dir=qwen3_cache, startup_timeout_s=600.0, shutdown_timeout_s=5)
    with running_server(omni_pipeline(), settings=settings, entry_points=True) as (base, _, m):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        yield client, m


def test_a_streamed_chat_gets_pcm16_audio_deltas_while_the_transcript_comes(served):
    client, metrics = served
    stream = client.chat.completions.create(
        model="qwen3-omni",
        messages=CHAT,
        modalities=["text", "audio"],
        audio={"voice": "Ethan", "format": "pcm16"},
        max_tokens=TOKENS,
        seed=0,
        stream=True,
        extra_body={"min_tokens": TOKENS},
    )
    kinds: list[str] = []  # "audio" / "text", in arrival order
    pcm = b""
    for chunk in stream:
        if not chunk.choices:
            continue
        audio = chunk.choices[0].delta.audio
        if audio is None:
            continue
        data = audio.get("data") if isinstance(audio, dict) else getattr(audio, "data", None)
        said = audio.get("transcript") if isinstance(audio, dict) else audio.transcript
        if data:
            kinds.append("audio")
            pcm += base64.b64decode(data)
        if said:
            kinds.append("text")
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds)]
    assert kinds.count("audio") > 1, runs  # streamed: several chunks, not one WAV
    last_text = len(kinds) - 1 - kinds[::-1].index("text")
    assert "audio" in kinds[:last_text], runs  # speech while the transcript was still coming
    assert len(pcm) % 2 == 0 and (len(pcm) // 2 + LOOKAHEAD) % FRAME == 0  # whole frames
    assert metrics.registry.get_sample_value("omni_time_to_first_audio_seconds_count") >= 1
    assert metrics.registry.get_sample_value("omni_audio_rtf_count") >= 1
