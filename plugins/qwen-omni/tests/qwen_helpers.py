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


def hf_inputs(hf: Any, chat: list[dict[str, Any]], **media: Any) -> tuple[str, Any]:
    """transformers' rendering of ``chat`` and its processor inputs (``hf``: the conftest's
    ``(processor, model)``)."""
    proc, _ = hf
    text = proc.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return text, proc(text=text, return_tensors="pt", **media)


def greedy(hf: Any, chat: list[dict[str, Any]], new_tokens: int, **media: Any) -> Any:
    """transformers' greedy thinker reply: ``(text, inputs, generated ids)``."""
    import torch

    text, inputs = hf_inputs(hf, chat, **media)
    with torch.no_grad():
        out = hf[1].generate(
            **inputs,
            generation_mode="text",
            thinker_do_sample=False,
            thinker_max_new_tokens=new_tokens,
        )
    return text, inputs, out[0, inputs["input_ids"].shape[1] :].tolist()


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
