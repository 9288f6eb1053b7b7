"""``/v1/realtime`` on ``qwen2.5-omni-duplex`` speaks as token2wav streams (issue 27): a reply's
audio arrives as one ``response.output_audio.delta`` per streamed token2wav chunk, the first while
the thinker's text deltas are still coming. Whole-utterance decoding would send one audio delta,
after the talker's last code (the talker follows the thinker a token behind and speaks ~256 codes:
longer than the thinker's reply takes)."""

from __future__ import annotations

import itertools
from typing import Any

import openai
import pytest
from omni_qwen.duplex import duplex_pipeline

from omni_core import OmniSettings
from omni_core.testing.server import running_server

AUDIO, TEXT = "response.output_audio.delta", "response.output_text.delta"
NO_VAD = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
REPLY_TOKENS = 450  # the thinker's cap: first audio needs 36 codes and one DiT window


@pytest.fixture(scope="module")
def client(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=600.0, shutdown_timeout_s=5)
    with running_server(duplex_pipeline(), settings=settings, entry_points=True) as (base, _, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)


def test_a_spoken_reply_streams_an_audio_delta_per_token2wav_chunk(client):
    kinds: list[str] = []
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        conn.recv()
        conn.session.update(session={**NO_VAD, "max_output_tokens": REPLY_TOKENS})
        while conn.recv().type != "session.updated":
            pass
        conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Tell me about the sea."}],
            }
        )
        conn.response.create()
        done: Any = None
        while kinds.count(AUDIO) < 2:  # two chunks are enough: the rest is cancelled
            event = conn.recv()
            kinds.append(event.type)
            if event.type in ("response.done", "error"):
                done = event
                break
        if done is None:
            conn.response.cancel()
            while (event := conn.recv()).type != "response.done":
                kinds.append(event.type)
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds) if k in (AUDIO, TEXT)]
    assert kinds.count(AUDIO) >= 2, runs  # one delta per token2wav chunk, not one per reply
    first_audio = kinds.index(AUDIO)
    assert TEXT in kinds[first_audio:], runs  # speech while the thinker was still replying
