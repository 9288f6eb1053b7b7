"""Tools in realtime sessions (OpenAI Realtime's function tools), on the core's tool machinery.

``session.update`` sets ``tools`` (``{"type": "function", "name", "description", "parameters"}``,
Realtime's flat shape) and ``tool_choice`` (``none`` / ``auto`` / ``required`` /
``{"type": "function", "name"}``); each is checked as the chat route checks its own
(:func:`omni_core.extend.check_tools`: a function name, a valid JSON schema, a named choice among
the tools), a bad one is one ``error`` naming the field.

A response of a session with tools reads its text as the chat route does
(:class:`omni_core.extend.ToolCalling`): ``required`` and a named function are forced through the
vLLM stage's structured output (the tools' JSON schema), ``auto`` goes through the pipeline's
``tool_call_parser`` (vLLM's parser classes, in a worker thread). Each call becomes a
``function_call`` output item: ``response.output_item.added``, its arguments as
``response.function_call_arguments.delta`` events, ``response.function_call_arguments.done``,
``response.output_item.done``; a completed call enters the conversation, and a client's
``function_call_output`` item (``conversation.item.create``) answers it. The model plug renders
both (the ``chat`` plug: the chat template's assistant ``tool_calls`` and ``tool`` message).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_duplex import protocol as P
from omni_duplex.errors import DuplexError

if TYPE_CHECKING:
    from omni_core.extend import ToolDef

    from omni_duplex.config import SessionConfig
    from omni_duplex.model import DuplexModel, ResponsePlan
    from omni_duplex.session import SessionRunner, _Response

CHOICES = ("none", "auto", "required")
_TOOL_FIELDS = ("type", "name", "description", "parameters")


def _bad(field: str, problem: str) -> DuplexError:
    return DuplexError("invalid_session_config", f"'session.{field}': {problem}")


def tool_defs(tools: list[dict[str, Any]]) -> list[ToolDef]:
    """Realtime function tools → the core's :class:`ToolDef` s, checked (a function name, a valid
    JSON schema, no name twice); one :class:`DuplexError` naming the field otherwise."""
    from omni_core.extend import ApiError, ToolDef, check_tools
    from pydantic import ValidationError

    defs = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(where, f"a function tool is an object, not {type(tool).__name__}")
        unknown = sorted(set(tool) - set(_TOOL_FIELDS))
        if unknown:
            raise _bad(f"{where}.{unknown[0]}", "unknown field")
        if tool.get("type", "function") != "function":
            raise _bad(f"{where}.type", f"{tool.get('type')!r}: only 'function' tools")
        function = {k: v for k, v in tool.items() if k != "type"}
        try:
            defs.append(ToolDef.model_validate({"type": "function", "function": function}))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"][1:]) or "name"
            raise _bad(f"{where}.{loc}", err["msg"]) from None
        names = [d.function.name for d in defs[:-1]]
        if defs[-1].function.name in names:
            raise _bad(f"{where}.name", f"'{defs[-1].function.name}' is already a tool's name")
    try:
        check_tools(defs, "none")
    except ApiError as exc:  # "'tools[i].function.parameters': ..." in the chat route's words
        raise DuplexError(
            "invalid_session_config",
            re.sub(r"'tools\[(\d+)\]\.function\.", r"'session.tools[\1].", exc.message),
        ) from None
    return defs


def choice_of(config: SessionConfig) -> Any:
    """The session's ``tool_choice`` as the core's (a string or a ``NamedToolChoice``)."""
    from omni_core.extend import NamedToolChoice

    choice = config.tool_choice
    if isinstance(choice, dict):
        return NamedToolChoice.model_validate({"function": {"name": choice["name"]}})
    return choice


def check_config(config: SessionConfig) -> None:
    """``tools`` and ``tool_choice`` of a session's config (raises :class:`DuplexError`)."""
    choice = config.tool_choice
    if isinstance(choice, dict):
        if set(choice) - {"type", "name"} or choice.get("type", "function") != "function":
            raise _bad("tool_choice", "a forced function is {'type': 'function', 'name': ...}")
        if not isinstance(choice.get("name"), str):
            raise _bad("tool_choice.name", "must be a function's name (a string)")
        names = [t.get("name") for t in config.tools if isinstance(t, dict)]
        if choice["name"] not in names:
            raise _bad("tool_choice.name", f"'{choice['name']}' is not one of 'tools' ({names})")
    elif choice not in CHOICES:
        raise _bad("tool_choice", f"{choice!r}: one of {list(CHOICES)} or a named function")
    if choice == "required" and not config.tools:
        raise _bad("tool_choice", "'required' needs 'tools'")
    tool_defs(config.tools)


def check_model(model: DuplexModel, config: SessionConfig, where: str = "'session.tools'") -> None:
    """Tools need a model plug that renders tool calls and their outputs."""
    if config.tools and not model.supports_tools:
        raise DuplexError(
            "tools_unsupported",
            f"{where}: duplex model '{model.name}' does not render tool calls (use a pipeline "
            "whose duplex.model is 'chat')",
        )


def new_item_id() -> str:
    return f"item_{uuid.uuid4().hex[:16]}"


# --- one response -------------------------------------------------------------------------------
@dataclass(slots=True)
class Call:
    item_id: str
    call_id: str
    name: str
    output_index: int
    arguments: str = ""
    done: bool = False

    def item(self, status: str) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "object": "realtime.item",
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }


@dataclass(slots=True)
class ResponseTools:
    """A response's tool calling: the core's stream of content/tool-call deltas and its calls."""

    stream: Any  # omni_core's ToolStream
    calls: dict[int, Call] = field(default_factory=dict)
    status: str = "in_progress"  # the response's, once it ended


async def prepare(runner: SessionRunner, plan: ResponsePlan) -> ResponseTools | None:
    """A response's tool calling (None without tools or with ``tool_choice`` none); ``plan``'s
    first-stage params gain the forced schema (structured output) and the parser's sampling
    changes, and a forced call is text only (no voice reads JSON out)."""
    import msgspec

    config, model = runner.config, runner.model
    if not config.tools or config.tool_choice == "none":
        return None
    check_model(model, config)
    # vLLM's parser and request classes: imports, a parser built on the tokenizer
    stream, extras, forced = await asyncio.to_thread(_calling, config, model)
    if forced:
        plan.modalities = ["text"]
    params = dict(runner.manager.default_params if plan.params is None else plan.params)
    if extras and params:
        first = min(params)
        extra = dict(params[first].extra)
        extra["vllm"] = {**extra.get("vllm", {}), **extras}
        params[first] = msgspec.structs.replace(params[first], extra=extra)
        plan.params = params
    return ResponseTools(stream)


def _calling(config: SessionConfig, model: DuplexModel) -> tuple[Any, dict[str, Any], bool]:
    """The core's stream of a response's tool calling, its vLLM sampling extras, and whether
    the call is forced; blocking."""
    from omni_core.extend import ApiError, ToolCalling, forced_schema

    defs, choice = tool_defs(config.tools), choice_of(config)
    parser, tokenizer, where = model.tool_parser()
    try:
        calling = ToolCalling.of(defs, choice, parser, tokenizer, where)
        forced = forced_schema(defs, choice, None)
    except ApiError as exc:  # "'tool_choice': ... needs a tool-call parser", "'tools': ..."
        raise DuplexError("tools_unsupported", f"'session.{exc.message[1:]}") from None
    assert calling is not None
    extras: dict[str, Any] = calling.vllm_adjustments()
    if forced is not None:
        extras["structured_outputs"] = {"json": forced}
    return calling.streamer(), extras, forced is not None


async def on_text(runner: SessionRunner, resp: _Response, text: str, token_ids: list[int]) -> None:
    """A text delta of a response with tools: its content and its calls' pieces as events."""
    assert resp.tools is not None
    emit(runner, resp, await resp.tools.stream.delta(text, list(token_ids)))


async def flush(runner: SessionRunner, resp: _Response) -> None:
    """The end of the text: what the stream still held (``required``'s last call, the rest of an
    ``auto`` call's arguments)."""
    assert resp.tools is not None
    emit(runner, resp, await resp.tools.stream.finish())


def emit(runner: SessionRunner, resp: _Response, delta: dict[str, Any]) -> None:
    assert resp.tools is not None
    content = delta.get("content")
    if content:
        resp.text.append(content)
        runner.emit(P.TEXT_DELTA, response_id=resp.id, item_id=resp.item_id, delta=content)
    for piece in delta.get("tool_calls") or ():
        index = int(piece.get("index", 0))
        function = piece.get("function") or {}
        call = resp.tools.calls.get(index)
        if call is None:
            has_message = bool(resp.text or resp.audio_bytes)
            call = Call(
                new_item_id(),
                piece.get("id") or f"call_{uuid.uuid4().hex[:16]}",
                function.get("name") or "",
                int(has_message) + len(resp.tools.calls),
            )
            resp.tools.calls[index] = call
            runner.emit(
                P.OUTPUT_ITEM_ADDED,
                response_id=resp.id,
                output_index=call.output_index,
                item=call.item("in_progress"),
            )
        arguments = function.get("arguments")
        if arguments:
            call.arguments += arguments
            runner.emit(
                P.FUNCTION_CALL_ARGUMENTS_DELTA,
                response_id=resp.id,
                item_id=call.item_id,
                output_index=call.output_index,
                call_id=call.call_id,
                delta=arguments,
            )


def close_calls(runner: SessionRunner, resp: _Response, status: str) -> list[dict[str, Any]]:
    """Each open call's ``.done`` events (``incomplete`` unless the response completed); the
    completed calls enter the conversation. Returns the calls' items for ``response.done``."""
    if resp.tools is None:
        return []
    items = []
    resp.tools.status = status
    item_status = "completed" if status == "completed" else "incomplete"
    for call in resp.tools.calls.values():
        if not call.done:
            call.done = True
            runner.emit(
                P.FUNCTION_CALL_ARGUMENTS_DONE,
                response_id=resp.id,
                item_id=call.item_id,
                output_index=call.output_index,
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
            )
            runner.emit(
                P.OUTPUT_ITEM_DONE,
                response_id=resp.id,
                output_index=call.output_index,
                item=call.item(item_status),
            )
        items.append(call.item(item_status))
    return items


def remember_calls(runner: SessionRunner, resp: _Response) -> None:
    """A completed response's calls enter the conversation (after its message, if any)."""
    if resp.tools is None or resp.tools.status != "completed":
        return
    for call in resp.tools.calls.values():
        runner._remember(
            "assistant",
            call.item_id,
            call.arguments,
            type="function_call",
            call_id=call.call_id,
            name=call.name,
        )


def add_output(runner: SessionRunner, cmd: P.ToolOutput) -> None:
    """``conversation.item.create`` of a ``function_call_output``: it answers a call of the
    conversation and enters it (rendered as the chat template's tool message)."""
    if not runner.model.supports_tools:
        raise DuplexError(
            "tools_unsupported",
            f"conversation.item.create: 'item.type': duplex model '{runner.model.name}' does not "
            "render tool outputs (use a pipeline whose duplex.model is 'chat')",
        )
    calls = [h for h in runner.history if h.get("type") == "function_call"]
    if not any(h["call_id"] == cmd.call_id for h in calls):
        known = [h["call_id"] for h in calls]
        raise DuplexError(
            "invalid_event",
            f"conversation.item.create: 'item.call_id': no function_call '{cmd.call_id}' in the "
            f"conversation ({known})",
        )
    item_id = cmd.item_id or new_item_id()
    runner._remember("tool", item_id, cmd.output, type="function_call_output", call_id=cmd.call_id)
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": cmd.call_id,
        "output": cmd.output,
    }
    runner.emit(P.ITEM_ADDED, item=item)
    runner.emit(P.ITEM_DONE, item=item)
