"""The ``chat`` model plug: a session as a chat, rendered by the first stage's chat template.

Each response re-renders the conversation (instructions as the system message, the history, the
new turns) through the engine's ``render_chat`` (what ``omni serve``'s chat route sends: the chat
template, then the tokenizer), with the session's tools in the template's ``tools``. Where it
does not fit the first stage's ``max_model_len`` (with the response's ``max_tokens``), the
oldest history items are left out of the prompt until it does (a tool output never without its
call); the new turns always go in. A function
call of the history is an assistant message's ``tool_calls``, its ``function_call_output`` a
``tool`` message (:mod:`omni_duplex.tools`), exactly as chat messages render them. Outputs are
projected as the ``tiny-omni`` plug does (the text stage's text, audio chunks at 24 kHz).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from omni_duplex.errors import DuplexError
from omni_duplex.model import ResponseContext, ResponsePlan, TinyOmniModel

if TYPE_CHECKING:
    from omni_core.extend import OmniEngineBase

NAME = "chat"


def conversation(context: ResponseContext) -> list[dict[str, Any]]:
    """The session's conversation as OpenAI chat messages."""
    messages: list[dict[str, Any]] = []
    if context.session.instructions:
        messages.append({"role": "system", "content": context.session.instructions})
    for item in context.history:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["text"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)  # the calls of one response: one message
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["text"]}
            )
        else:
            text = item["text"] or ("(a spoken turn)" if item["role"] == "user" else "")
            messages.append({"role": item["role"], "content": text})
    for turn in context.turns:
        parts = [turn.text] if turn.text else []
        if turn.audio is not None and turn.audio_ms:
            parts.append(f"(the user spoke for {turn.audio_ms / 1000:.1f} seconds)")
        messages.append({"role": "user", "content": " ".join(parts)})
    if not any(m["role"] != "system" for m in messages):
        messages.append({"role": "user", "content": "Hello."})
    return messages


def tool_list(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Realtime's flat function tools → the chat template's ``tools`` (OpenAI chat's shape)."""
    out = [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in tools
    ]
    return out or None


class ChatModel(TinyOmniModel):
    """Sessions as chats through the first stage's chat template; renders tools."""

    name = NAME
    supports_tools = True
    plans_off_loop = True  # render_chat tokenizes

    def __init__(self) -> None:
        self.engine: OmniEngineBase | None = None
        self.parser: type | None = None
        self.where = "none set"

    def bind(self, engine: Any) -> None:
        from omni_core.extend import load_parser

        self.engine = engine
        renderer = engine.prompt_renderer  # loads the tokenizer now, not in a session
        name = getattr(renderer, "tool_call_parser", None)
        self.where = f"stage '{renderer.stage_name}': " + (f"'{name}'" if name else "none set")
        self.parser = load_parser(name, renderer.stage_name) if name else None

    def tool_parser(self) -> tuple[type | None, Any, str]:
        assert self.engine is not None
        return self.parser, getattr(self.engine.prompt_renderer, "tokenizer", None), self.where

    def plan_response(self, context: ResponseContext) -> ResponsePlan:
        """Blocking (the chat template, the tokenizer): sessions call it in a worker thread."""
        from omni_core import RequestError
        from omni_core.extend import ChatOptions

        assert self.engine is not None, "ChatModel.bind was not called"
        plan = super().plan_response(context)
        options = ChatOptions(tools=tool_list(context.session.tools))
        limit = getattr(self.engine.prompt_renderer, "max_model_len", None)
        first_stage = plan.params[min(plan.params)] if plan.params else None
        reserve = (first_stage.max_tokens if first_stage is not None else None) or 1
        history, first = context.history, 0
        while True:
            try:
                rendered = self.engine.render_chat(
                    conversation(replace(context, history=history[first:])), options
                )
                count = rendered.num_tokens
                fits = limit is None or count is None or count + reserve <= limit
            except RequestError as exc:
                if "max_model_len" not in str(exc) or first >= len(history):
                    code = "input_rejected" if "max_model_len" in str(exc) else "invalid_request"
                    raise DuplexError(code, f"the conversation: {exc}") from None
                fits = False
            if fits or first >= len(history):
                break
            first += 1  # the oldest item out; a tool output goes with its call
            while first < len(history) and history[first].get("type") == "function_call_output":
                first += 1
        plan.prompt = rendered.prompt
        return plan


def build(pipeline: Any, section: Any) -> ChatModel:
    """The ``omni_duplex_register_models`` factory."""
    return ChatModel()
