"""The bridges of Qwen3-Omni: thinker → talker (registered as ``qwen3-omni-talker``) and talker →
code2wav (``qwen3-omni-code2wav``: omni-qwen's :func:`~omni_qwen.api.talker_codes`, always a
list, so a talker ending without a frame still gets code2wav's zero-length audio).

The thinker is a ``vllm`` stage with ``engine_args.hidden_states: {layers: [embeddings,
"layer:K"]}`` (K: the talker's ``accept_hidden_layer``); the talker (:mod:`omni_qwen3.talker`)
reads, per position, the embedding-layer output and layer K's (the latter only at the prompt's
audio/image rows), the prompt's ids and image sizes, and the reply's ids. Like omni-qwen's
Qwen2.5-Omni bridge (whose helpers it uses), it keeps no state: on a ``stream`` edge each call
gets what arrived since the last one; its first call opens the talker's request.
"""

from __future__ import annotations

from typing import Any

from omni_qwen.api import talker_codes as talker_to_code2wav
from omni_qwen.api import thinker_chunk

from omni_core import StageResult

BRIDGE = "qwen3-omni-talker"
CODE2WAV_BRIDGE = "qwen3-omni-code2wav"
__all__ = ["BRIDGE", "CODE2WAV_BRIDGE", "talker_to_code2wav", "thinker_to_talker"]


def thinker_to_talker(
    sources: list[StageResult], original_prompt: Any, params: Any
) -> dict[str, Any] | None:
    """The talker's input for what the thinker produced since the last call (None: nothing)."""
    return thinker_chunk(sources, original_prompt, _layers)


def _layers(layers: dict[str, Any]) -> dict[str, Any]:
    hidden = [name for name in layers if name.startswith("layer:")]
    if "embeddings" not in layers or len(hidden) != 1:
        raise ValueError(
            "the Qwen3-Omni talker needs the thinker's 'embeddings' and one 'layer:K' (K = "
            f"talker_config.accept_hidden_layer) hidden states, got {sorted(layers)}: set the "
            "thinker's engine_args.hidden_states.layers"
        )
    return {"embeddings": layers["embeddings"], "hidden": layers[hidden[0]]}
