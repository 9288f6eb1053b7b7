"""OpenAI chat content parts on the Qwen2.5-Omni thinker through ``omni serve``: ``input_audio``
(a WAV) and ``image_url`` (a data URL) become the stage's multimodal prompt, rendered by the
checkpoint's chat template; the greedy reply equals transformers' on the same media."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import openai
import pytest
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, greedy, image, sine

from omni_core import OmniSettings
from omni_core.plugin.hooks import PluginHost
from omni_core.testing.server import running_server

NEW_TOKENS = 16
MODEL = "qwen2.5-omni-thinker"


@pytest.fixture(scope="module")
def client(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0, shutdown_timeout_s=5)
    config = PluginHost.create(settings).pipelines()[MODEL].load()
    with running_server(config, settings=settings, entry_points=True) as (base, _, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=120)


def wav_b64(samples: np.ndarray, rate: int = SAMPLE_RATE) -> str:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return base64.b64encode(out.getvalue()).decode()


def png_url(picture) -> str:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def reference_text(hf, chat, **media) -> str:
    _, _, ids = greedy(hf, chat, NEW_TOKENS, **media)
    # vLLM's incremental detokenizer holds back a trailing incomplete UTF-8 sequence, which a
    # whole decode renders as U+FFFD: compare without it
    return hf[0].tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd")


def chat(client, content) -> str:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=NEW_TOKENS,
        temperature=0,
    )
    return reply.choices[0].message.content, reply.usage


def test_input_audio_part_is_the_audio_prompt(client, hf):
    audio = sine()
    sent = wav_b64(audio)
    heard = np.frombuffer(base64.b64decode(sent)[44:], dtype="<i2").astype(np.float32) / 32768
    content = [
        {"type": "input_audio", "input_audio": {"data": sent, "format": "wav"}},
        {"type": "text", "text": AUDIO_CHAT[0]["content"][1]["text"]},
    ]
    text, usage = chat(client, content)
    assert text.rstrip("\ufffd") == reference_text(hf, AUDIO_CHAT, audio=[heard]) and text
    rendered = hf[0].apply_chat_template(AUDIO_CHAT, add_generation_prompt=True, tokenize=False)
    unexpanded = hf[0].tokenizer(rendered)["input_ids"]
    assert usage.prompt_tokens == len(unexpanded)  # one placeholder: counted before the stage
    # expands it to the audio's 25 tokens (documented)


def test_audio_at_another_rate_is_resampled(client, hf):
    at_8k = sine()[::2]  # the same tone sampled at 8 kHz
    text, _ = chat(
        client,
        [
            {"type": "input_audio", "input_audio": {"data": wav_b64(at_8k, 8000), "format": "wav"}},
            {"type": "text", "text": "What do you hear?"},
        ],
    )
    assert text  # answered; the stage got 16 kHz audio of the same length (1 s)


def test_image_url_part_is_the_image_prompt(client, hf):
    picture = image()
    content = [
        {"type": "image_url", "image_url": {"url": png_url(picture)}},
        {"type": "text", "text": IMAGE_CHAT[0]["content"][1]["text"]},
    ]
    text, _ = chat(client, content)
    assert text.rstrip("\ufffd") == reference_text(hf, IMAGE_CHAT, images=[picture]) and text


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (
            [{"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}}],
            "not valid base64",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": "aGVsbG8=", "format": "wav"}}],
            "not a readable WAV",
        ),
        (
            [{"type": "input_audio", "input_audio": {"data": "aGVsbG8=", "format": "mp3"}}],
            "only 'wav'",
        ),
        (
            [{"type": "image_url", "image_url": {"url": "http://example.invalid/x.png"}}],
            "only base64 'data:image",
        ),
        (
            [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}],
            "not a readable image",
        ),
    ],
)
def test_bad_media_parts_are_400_naming_the_part(client, content, needle):
    with pytest.raises(openai.BadRequestError) as caught:
        chat(client, content)
    assert needle in str(caught.value) and "messages[0].content[0]" in str(caught.value)


def test_more_parts_than_the_stage_takes_is_400(client):
    part = {"type": "input_audio", "input_audio": {"data": wav_b64(sine(0.2)), "format": "wav"}}
    with pytest.raises(openai.BadRequestError, match=r"content\[1\].*at most 1 audio"):
        chat(client, [part, part])
    text, _ = chat(client, [part, {"type": "text", "text": "and now?"}])
    assert text  # the stage still serves
