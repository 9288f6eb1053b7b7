"""The ``prompt-embeds`` bridge: an upstream pooling stage's states as ``prompt_embeds``."""

from __future__ import annotations

from typing import Any

from omni_core import StageResult


def prompt_embeds_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """``{"prompt_embeds": float32 [tokens, hidden]}``: the one upstream stage's ``final``
    hidden states (a ``vllm`` stage with ``engine_args.pooling`` emits them in one chunk);
    None before it has any."""
    if len(sources) != 1:
        raise ValueError(f"the prompt-embeds bridge takes one upstream stage, got {len(sources)}")
    chunks = sources[0].hidden_states
    if not chunks:
        return None
    arrays = [chunk.layers.get("final") for chunk in chunks]
    if any(a is None for a in arrays):
        raise ValueError(f"stage '{sources[0].stage_name}' emitted no 'final' hidden states")
    if len(arrays) == 1:
        return {"prompt_embeds": arrays[0]}
    import numpy as np

    return {"prompt_embeds": np.concatenate(arrays)}
