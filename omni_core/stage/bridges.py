"""Built-in bridges: how upstream results become a downstream stage's input."""

from __future__ import annotations

from typing import Any

from omni_core.errors import ConfigError
from omni_core.outputs import StageResult


def default_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """Concatenate the upstream token ids (fan-in: in ``inputs`` order); else their text.

    Returns ``None`` when the upstream stages produced nothing (the stage is skipped). An upstream
    that produced payloads only (audio chunks, images) is not skipped silently: the request fails
    with a ``ConfigError`` naming the stage and the bridge to use (``bridge: audio`` for audio).
    """
    tokens: list[int] = []
    for source in sources:
        tokens.extend(source.token_ids)
    if tokens:
        return tokens
    text = "".join(source.text for source in sources)
    if text:
        return text
    for source in sources:
        if source.payloads:
            raise ConfigError([_payload_only(source, "the default bridge")])
    return None


def text_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """Forward the upstream text (fan-in: joined with newlines)."""
    text = "\n".join(s.text for s in sources if s.text)
    return text or None


def audio_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """Forward the upstream audio chunks: a list of ``AudioChunk`` (``samples`` a float32 array,
    ``sample_rate``), in order (fan-in: in ``inputs`` order). On a ``stream`` edge each forward
    carries the chunks that arrived since the previous one, so the downstream stage gets every
    chunk once: the first ones as its request's prompt, the rest through ``add_input``.
    ``None`` (nothing to forward yet) when no chunk arrived; an upstream that produced other
    payloads only fails the request naming it."""
    from omni_core.media import AudioChunk

    chunks = [p for s in sources for p in s.payloads if isinstance(p, AudioChunk)]
    if chunks:
        return chunks
    for source in sources:
        if source.payloads:
            raise ConfigError([_payload_only(source, "the audio bridge", "no audio chunk")])
    return None


def _payload_only(source: StageResult, bridge: str, what: str = "no token ids or text") -> str:
    kinds = sorted({type(p).__name__ for p in source.payloads})
    return (
        f"{bridge} has nothing to forward: stage '{source.stage_name}' produced payloads only "
        f"({', '.join(kinds)}), {what}; give the stage it feeds a bridge that reads them "
        "(`bridge: audio` for AudioChunk payloads, or a bridge of its own)"
    )
