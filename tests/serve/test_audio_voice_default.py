"""``audio`` without ``voice`` (issue 41: it was a 400 ``'audio.voice': Field required``): the
stages' default voice, as without ``audio``, in the format asked for; on the voice kit's pipeline
(tests/serve/voice_kit.py), no model needed."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.serve.conftest import running_server
from tests.serve.voice_kit import KIT, PIPELINE, plugin


@pytest.fixture(scope="module")
def server():
    with running_server(PIPELINE, plugins=[("voice-kit", plugin())]) as running:
        yield running


def chat(server, audio: dict) -> httpx.Response:
    KIT.seen.clear()
    body = {
        "model": "voice-test",
        "messages": [{"role": "user", "content": "say something"}],
        "modalities": ["text", "audio"],
        "audio": audio,
    }
    return httpx.post(f"{server[0]}/v1/chat/completions", json=body, timeout=30)


def test_audio_without_a_voice_speaks_in_the_default_voice(server):
    reply = chat(server, {"format": "pcm16"})
    assert reply.status_code == 200, reply.text
    samples = np.frombuffer(
        base64.b64decode(reply.json()["choices"][0]["message"]["audio"]["data"]), "<i2"
    )
    assert samples.size and np.all(samples == int(0.1 * 32767))  # the kit's default voice
    assert all("voice" not in extra for _, _, extra in KIT.seen)


def test_an_empty_voice_is_still_a_400_naming_it(server):
    reply = chat(server, {"voice": "", "format": "wav"})
    assert reply.status_code == 400
    assert "audio.voice" in reply.json()["error"]["message"]
