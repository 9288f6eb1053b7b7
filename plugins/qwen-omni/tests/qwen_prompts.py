"""Prompts for the tiny Qwen-Omni checkpoints, shared by omni-qwen's and omni-qwen3's tests (test
code, not shipped: omni-qwen3's tests find it through ``pythonpath`` in omni-core's and
omni-qwen3's ``pyproject.toml``): a text chat, a 1 s 440 Hz sine + text chat, a gradient image +
text chat, transformers' rendering of a chat and its teacher-forced hidden states (numpy always;
PIL only when an image is made)."""

from __future__ import annotations

from typing import Any

import numpy as np

SAMPLE_RATE = 16000

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


def sine(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    """A ``hz`` sine of ``seconds`` at :data:`SAMPLE_RATE`, amplitude 0.5, float32."""
    t = np.arange(int(SAMPLE_RATE * seconds), dtype=np.float64) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def gradient(side: int) -> Any:
    """A ``side`` x ``side`` RGB gradient image (PIL)."""
    from PIL import Image

    pixels = (np.arange(side * side * 3).reshape(side, side, 3) % 255).astype(np.uint8)
    return Image.fromarray(pixels)


def hf_inputs(hf: Any, chat: list[dict[str, Any]], **media: Any) -> tuple[str, Any]:
    """transformers' rendering of ``chat`` and its processor inputs (``hf``: the tests'
    ``(processor, model)``)."""
    proc, _ = hf
    text = proc.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return text, proc(text=text, return_tensors="pt", **media)


def teacher_forced(
    hf: Any, chat: list[dict[str, Any]], generated: list[int], **media: Any
) -> tuple[list[int], Any]:
    """transformers' prompt ids and thinker hidden states over prompt + generated[:-1]."""
    import torch

    _, inputs = hf_inputs(hf, chat, **media)
    prompt = inputs["input_ids"][0].tolist()
    ids = torch.tensor([prompt + generated[:-1]])
    forward = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
    with torch.no_grad():
        out = hf[1].thinker(
            input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True, **forward
        )
    return prompt, out.hidden_states
