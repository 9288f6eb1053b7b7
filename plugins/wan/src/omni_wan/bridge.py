"""The ``wan-embeds`` bridge: the UMT5 encoder stage's states as ``prompt_embeds``."""

from __future__ import annotations

from typing import Any

from omni_core import StageResult


def wan_embeds_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """``{"prompt_embeds": float32 [max_sequence_length, text_dim]}`` from the one upstream
    stage's ``final`` hidden states; None before it has any."""
    if len(sources) != 1:
        raise ValueError(f"the wan-embeds bridge takes one upstream stage, got {len(sources)}")
    chunks = sources[0].hidden_states
    if not chunks:
        return None
    array = chunks[-1].layers.get("final")
    if array is None:
        raise ValueError(f"stage '{sources[0].stage_name}' emitted no 'final' hidden states")
    return {"prompt_embeds": array}
