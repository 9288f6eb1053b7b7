"""What a caller sent, kept beside the rendered prompt so that hooks can read it.

A chat sent to a first stage with a tokenizer reaches the stages as token ids (or
``{"prompt_token_ids", "multi_modal_data"}``): an admission hook reading only ``prompt`` could
not see the chat's text. The engine records a :class:`RequestInput` with every request (built on
the caller's side, never on the orchestrator loop) and :class:`~omni_core.views.RequestView`
exposes it as ``messages``, ``parts`` and ``text``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_core.chat import ChatMessage, RenderedPrompt

__all__ = ["RequestInput", "chat_input", "prompt_input", "rendered_input"]


@dataclass(frozen=True, slots=True)
class RequestInput:
    """``messages``: the chat as OpenAI-style dicts (None for a prompt); ``parts``: its non-text
    content parts (``image_url``, ``input_audio`` dicts) in order; ``text``: the user-visible
    text (every message's text, joined by newlines; a prompt's text)."""

    messages: tuple[dict[str, Any], ...] | None
    parts: tuple[dict[str, Any], ...]
    text: str


def chat_input(messages: Sequence[ChatMessage]) -> RequestInput:
    """A chat's input: its messages as dicts, their media parts, their text."""
    dumped = tuple(m.model_dump(exclude_none=True) for m in messages)
    parts = tuple(
        part
        for message in dumped
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") != "text"
    )
    return RequestInput(dumped, parts, "\n".join(m.text() for m in messages))


def prompt_input(prompt: Any, text: str | None = None) -> RequestInput:
    """A prompt's input: a string is its own text, a dict's text is its ``"prompt"`` string;
    token ids have the ``text`` given (a tokenizer's decoding) or none."""
    if text is None:
        if isinstance(prompt, str):
            text = prompt
        elif isinstance(prompt, dict) and isinstance(prompt.get("prompt"), str):
            text = prompt["prompt"]
        else:
            text = ""
    return RequestInput(None, (), text)


def rendered_input(rendered: RenderedPrompt) -> RequestInput:
    """The input a :class:`~omni_core.chat.RenderedPrompt` was rendered from: its chat, else
    its text (``/v1/completions`` tokenizes a text prompt; the text is what the caller sent)."""
    if rendered.messages is not None:
        return chat_input(rendered.messages)
    return prompt_input(rendered.prompt, rendered.text)
