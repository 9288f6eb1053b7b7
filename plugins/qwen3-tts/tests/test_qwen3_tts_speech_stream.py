"""``/v1/audio/speech/stream`` (WebSocket): text in as it is written, speech out as it is
decoded. The first sentence is spoken **before the rest of the text is sent** (the client waits
for audio first: an order, not a timing); each sentence's audio equals ``POST /v1/audio/speech``
of that sentence with the same seed; a bad config is an error event naming the field."""

from __future__ import annotations

import asyncio
import json

import pytest
from omni_qwen3_tts.pipelines import tts_pipeline

from omni_core.testing.server import running_server

pytestmark = pytest.mark.timeout(600)

CONFIG = {"type": "session.config", "voice": "ryan", "seed": 4, "max_new_tokens": 10}


@pytest.fixture(scope="module")
def base(tiny_tts, built_model):
    from omni_core import OmniSettings

    settings = OmniSettings(cache_dir=built_model.cache, startup_timeout_s=600.0)
    with running_server(tts_pipeline(), settings=settings, entry_points=True) as (url, _, _):
        yield url


async def converse(url: str) -> tuple[list[bytes], list[dict], bytes]:
    import websockets

    audio: list[bytes] = []
    events: list[dict] = []
    async with websockets.connect(url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps(CONFIG))
        await ws.send(json.dumps({"type": "input.text.delta", "delta": "Hello world. How"}))
        first = await ws.recv()  # speech of the first sentence, before the rest of the text
        assert isinstance(first, bytes)
        audio.append(first)
        await ws.send(json.dumps({"type": "input.text.delta", "delta": " are you"}))
        await ws.send(json.dumps({"type": "input.text.done"}))
        async for message in ws:
            if isinstance(message, bytes):
                audio.append(message)
            else:
                events.append(json.loads(message))
    return audio, events, first


def test_speech_starts_before_the_text_ends_and_matches_each_sentence(base):
    import httpx

    audio, events, _ = asyncio.run(converse(base))
    assert [e["type"] for e in events] == [
        "speech.segment.done",
        "speech.segment.done",
        "speech.done",
    ]
    assert [e.get("text") for e in events[:2]] == ["Hello world.", "How are you"]
    spoken = b"".join(audio)
    alone = b""
    for sentence in ("Hello world.", "How are you"):
        reply = httpx.post(
            f"{base}/v1/audio/speech",
            json={"input": sentence, "voice": "ryan", "seed": 4, "max_new_tokens": 10,
                  "response_format": "pcm"},
            timeout=300,
        )  # fmt: skip
        assert reply.status_code == 200
        alone += reply.content
    assert spoken == alone


def test_a_bad_config_is_an_error_event_naming_the_field(base):
    import websockets

    async def run() -> dict:
        async with websockets.connect(base.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
            await ws.send(json.dumps({**CONFIG, "voice": "nobody"}))
            await ws.send(json.dumps({"type": "input.text.delta", "delta": "Hello there. "}))
            return json.loads(await ws.recv())

    event = asyncio.run(run())
    assert event["type"] == "error" and event["param"] == "voice"
    assert "available: aiden, dylan, ryan, vivian" in event["message"]
