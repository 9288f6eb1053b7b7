"""Prompts shared by the omni-qwen3 tests: text, a 1 s 440 Hz sine + text, a 64x64 image + text."""

from __future__ import annotations

from typing import Any

import numpy as np

SAMPLE_RATE = 16000
IM_END = 4002
AUDIO_TOKEN, IMAGE_TOKEN = 4032, 4012


def sine(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(SAMPLE_RATE * seconds), dtype=np.float64) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def image() -> Any:
    """A 64x64 RGB gradient (4 merged vision tokens at the tiny processor's sizes)."""
    from PIL import Image

    pixels = (np.arange(64 * 64 * 3).reshape(64, 64, 3) % 255).astype(np.uint8)
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


def hf_inputs(hf: Any, chat: list[dict[str, Any]], **media: Any) -> tuple[str, Any]:
    """transformers' rendering of ``chat`` and its processor inputs."""
    proc, _ = hf
    text = proc.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return text, proc(text=text, return_tensors="pt", **media)


def greedy(hf: Any, chat: list[dict[str, Any]], new_tokens: int, **media: Any) -> Any:
    """transformers' greedy thinker reply: ``(text, inputs, generated ids)`` (the tiny vocab's
    ``<|im_end|>`` as EOS: generate() defaults to the real id 151645)."""
    import torch

    text, inputs = hf_inputs(hf, chat, **media)
    with torch.no_grad():
        out = hf[1].generate(
            **inputs,
            return_audio=False,
            thinker_do_sample=False,
            thinker_max_new_tokens=new_tokens,
            thinker_eos_token_id=IM_END,
        )
    sequences = out.sequences if hasattr(out, "sequences") else out
    return text, inputs, sequences[0, inputs["input_ids"].shape[1] :].tolist()
