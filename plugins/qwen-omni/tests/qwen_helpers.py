"""Prompts shared by the omni-qwen tests: a text chat and a 1 s 440 Hz sine + text chat."""

from __future__ import annotations

from typing import Any

from qwen_prompts import (  # noqa: F401 (the tests import them from here)
    AUDIO_CHAT,
    IMAGE_CHAT,
    SAMPLE_RATE,
    TEXT_CHAT,
    gradient,
    hf_inputs,
    sine,
    teacher_forced,
)


def image() -> Any:
    """A 56x56 RGB gradient (4 merged vision tokens at the tiny processor's sizes)."""
    return gradient(56)


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
