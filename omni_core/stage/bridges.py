"""Built-in bridges: how upstream results become a downstream stage's input."""

from __future__ import annotations

from typing import Any

from omni_core.outputs import StageResult


def default_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """Concatenate the upstream token ids (fan-in: in ``inputs`` order); else their text.

    Returns ``None`` when the upstream stages produced nothing usable.
    """
    tokens: list[int] = []
    for source in sources:
        tokens.extend(source.token_ids)
    if tokens:
        return tokens
    text = "".join(source.text for source in sources)
    return text or None


def text_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """Forward the upstream text (fan-in: joined with newlines)."""
    text = "\n".join(s.text for s in sources if s.text)
    return text or None
