"""``omni serve`` on the real tiny pipelines: chat with audio (plain and streamed); images from
a python image stage."""

from __future__ import annotations

import base64
import io
import struct
import wave

import openai
import pytest

from tests.serve.conftest import running_server


@pytest.fixture(scope="module")
def omni_server():
    with running_server("tiny-omni") as running:
        yield running


def test_chat_with_audio_returns_a_wav_and_transcript(omni_server):
    base, _, _ = omni_server
    c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    reply = c.chat.completions.create(
        model="tiny-omni",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        messages=[{"role": "user", "content": "Say hello"}],
    )
    message = reply.choices[0].message
    assert message.content and message.audio.transcript == message.content
    wav = wave.open(io.BytesIO(base64.b64decode(message.audio.data)))
    assert wav.getframerate() == 16000 and wav.getnframes() > 0
    frames = wav.readframes(wav.getnframes())
    assert max(abs(s) for s in struct.unpack(f"<{len(frames) // 2}h", frames)) > 1000
    usage = reply.usage  # audio tokens: the codec tokens voiced, 320 samples each
    assert usage.completion_tokens_details.audio_tokens * 320 == wav.getnframes()
    assert usage.completion_tokens > usage.completion_tokens_details.audio_tokens
    assert usage.prompt_tokens > len("Say hello".split()) + 2  # the chat template's tokens too


def test_streamed_chat_with_audio_sends_pcm16_deltas(omni_server):
    base, _, _ = omni_server
    c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    stream = c.chat.completions.create(
        model="tiny-omni",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
        stream=True,
        messages=[{"role": "user", "content": "Say hello"}],
    )
    text, pcm = "", b""
    for chunk in stream:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        audio = getattr(delta, "audio", None)
        if audio is not None:
            pcm += base64.b64decode(audio.data if hasattr(audio, "data") else audio["data"])
    assert text and len(pcm) > 0 and len(pcm) % 640 == 0  # whole 320-sample codec frames


def draw(prompt, params):
    """An image stage (the real one, qwen-image, is omni-qwen-image's: its serve test)."""
    import numpy as np

    from omni_core.media import Image

    return Image(np.full((8, 12, 3), len(prompt), dtype=np.uint8))


IMAGE_PIPELINE = f"""
name: drawn
stages:
  - {{id: 0, name: draw, kind: python, engine_args: {{callable: "{__name__}:draw"}},
     final_output: true, final_output_type: image}}
"""


def test_images_generations_b64_png():
    with running_server(IMAGE_PIPELINE) as (base, _, _):
        c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        result = c.images.generate(model="drawn", prompt="a red square", response_format="b64_json")
        png = base64.b64decode(result.data[0].b64_json)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack("!II", png[16:24]) == (12, 8)  # width, height
        with pytest.raises(openai.BadRequestError, match="response_format"):
            c.images.generate(model="drawn", prompt="x", response_format="url")
