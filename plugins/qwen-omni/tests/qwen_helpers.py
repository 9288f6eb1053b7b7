"""Prompts shared by the omni-qwen tests: a text chat and a 1 s 440 Hz sine + text chat."""

from __future__ import annotations

from typing import Any

import numpy as np

SAMPLE_RATE = 16000


def sine(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(SAMPLE_RATE * seconds), dtype=np.float64) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def image() -> Any:
    """A 56x56 RGB gradient (4 merged vision tokens at the tiny processor's sizes)."""
    from PIL import Image

    pixels = (np.arange(56 * 56 * 3).reshape(56, 56, 3) % 255).astype(np.uint8)
    return Image.fromarray(pixels)


TEXT_CHAT = [{"role": "user", "content": [{"type": "text", "text": "Hello, who are you?"}]}]
AUDIO_CHAT = [
    {
        "role": "user",
        "content": [{"type": "audio"}, {"type": "text", "text": "What do you hear?"}],
    }
]
IMAGE_CHAT = [
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}
]


def hidden_states_bridge(sources: list[Any], original_prompt: Any, params: Any) -> Any:
    """A bridge as a talker's would be: the upstream thinker's token ids and its hidden states,
    joined per layer."""
    from omni_core.outputs import join_hidden_states

    (thinker,) = sources
    return {
        "ids": list(thinker.token_ids),
        "states": join_hidden_states(thinker.hidden_states),
        "chunks": len(thinker.hidden_states),
    }


def echo(prompt: Any, params: Any) -> Any:
    """A python stage that returns what its bridge gave it (as its output's payload)."""
    return prompt
