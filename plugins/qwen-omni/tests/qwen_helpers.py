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
