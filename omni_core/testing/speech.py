"""Helpers for tests of streamed speech out through ``omni serve`` with the official ``openai``
client (shared by the speech plugins' serve tests). Needs the ``serve`` extra and ``openai``."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omni_core.config.settings import OmniSettings
from omni_core.testing.server import running_server


@contextmanager
def served_openai_client(pipeline: Any, cache_dir: Path) -> Iterator[tuple[Any, Any]]:
    """Yields ``(client, metrics)``: an ``openai.OpenAI`` client on ``pipeline`` served with the
    installed plugins (entry points) and models under ``cache_dir``, and the server's metrics."""
    import openai

    settings = OmniSettings(cache_dir=cache_dir, startup_timeout_s=600.0, shutdown_timeout_s=5)
    with running_server(pipeline, settings=settings, entry_points=True) as (base, _, metrics):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        yield client, metrics


def streamed_speech(
    client: Any, model: str, voice: str, tokens: int, messages: list[dict[str, Any]]
) -> tuple[list[str], bytes]:
    """A streamed chat asking for text and pcm16 audio, its thinker held to exactly ``tokens``
    tokens (``max_tokens`` = ``min_tokens``, seed 0), read by :func:`audio_deltas`."""
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        modalities=["text", "audio"],
        audio={"voice": voice, "format": "pcm16"},
        max_tokens=tokens,
        seed=0,
        stream=True,
        extra_body={"min_tokens": tokens},
    )
    return audio_deltas(stream)


def audio_deltas(stream: Iterable[Any]) -> tuple[list[str], bytes]:
    """Reads a streamed chat's audio deltas: their kinds in arrival order (``"audio"`` for a delta
    with data, ``"text"`` for one with a transcript) and the concatenated decoded audio bytes."""
    kinds: list[str] = []
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
    return kinds, pcm
