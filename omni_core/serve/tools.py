"""Tool calling of ``omni serve``'s chat route, as vLLM's OpenAI server does it.

``tools`` and ``tool_choice`` (``none`` / ``auto`` / ``required`` / a named function):

- every choice but ``none`` needs the pipeline's tool-call parser (the first stage's
  ``tool_call_parser``, vLLM's ``--tool-call-parser``; without it a 400, as vLLM 0.32's server).
- ``required`` and a named function are forced through the vllm stage's structured output (the
  JSON schema vLLM derives from the tools: an array of ``{"name", "parameters"}`` for
  ``required``, the function's ``parameters`` for a named one), so any model, even a random one,
  emits a well-formed call; the answer's JSON becomes the tool calls (vLLM's JSON-based parsing).
- ``auto``: vLLM's own parser class reads the calls out of the answer, whole or delta by delta,
  in a worker thread (never on the event loop).
- ``none``: no calls are parsed (the tools still reach the chat template, as in vLLM).

finish_reason is ``tool_calls`` when ``auto`` or ``required`` called a tool, ``stop`` for a
named function (OpenAI's and vLLM's rule).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from omni_core.errors import ConfigError
from omni_core.serve.errors import ApiError

logger = logging.getLogger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Strict):
    """One of OpenAI's ``tools`` (a function)."""

    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    """A ``tool_choice`` naming one function (``{"type": "function", "function": {"name"}}``)."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


def check_tools(
    tools: list[ToolDef] | None, choice: ToolChoice | None
) -> tuple[list[ToolDef], ToolChoice]:
    """The request's tools and its effective ``tool_choice`` (vLLM's default: ``auto`` with
    tools, ``none`` without), each function's ``parameters`` a valid JSON schema; a 400 naming
    the field otherwise."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    tools = list(tools or [])
    for i, tool in enumerate(tools):
        params = tool.function.parameters
        if params is None:
            continue
        where = f"tools[{i}].function.parameters"
        dialect = params.get("$schema")
        if dialect is not None and not isinstance(dialect, str):
            raise ApiError(400, f"'{where}.$schema' must be a string", param="tools")
        try:
            validator_for(params).check_schema(params)
        except SchemaError as exc:
            raise ApiError(
                400, f"'{where}': not a valid JSON schema: {exc.message}", param="tools"
            ) from None
    choice = effective_choice(tools, choice)
    if choice != "none" and not tools:
        raise ApiError(
            400, "'tool_choice': a tool choice other than 'none' needs 'tools'", param="tool_choice"
        )
    if isinstance(choice, NamedToolChoice):
        names = [t.function.name for t in tools]
        if choice.function.name not in names:
            raise ApiError(
                400,
                f"'tool_choice': tool '{choice.function.name}' has not been passed in 'tools' "
                f"({names})",
                param="tool_choice",
            )
    return tools, choice


def effective_choice(tools: list[ToolDef] | None, choice: ToolChoice | None) -> ToolChoice:
    """``tool_choice`` as given, else vLLM's default: ``auto`` with tools, ``none`` without."""
    if choice is None:
        return "auto" if tools else "none"
    return choice


def _params_or_empty(params: dict[str, Any] | None) -> dict[str, Any]:
    return params if params is not None else {"type": "object", "properties": {}}


def forced_schema(
    tools: list[ToolDef], choice: ToolChoice, parallel: bool | None
) -> dict[str, Any] | None:
    """The JSON schema that forces a call (vLLM's ``get_json_schema_from_tools``): None for
    ``auto`` and ``none``."""
    if isinstance(choice, NamedToolChoice):
        chosen = next(t for t in tools if t.function.name == choice.function.name)
        return _params_or_empty(chosen.function.parameters)
    if choice != "required":
        return None
    defs: dict[str, Any] = {}
    variants = []
    for tool in tools:
        params = dict(_params_or_empty(tool.function.parameters))
        for name, sub in (params.pop("$defs", None) or {}).items():
            if name in defs and defs[name] != sub:
                raise ApiError(
                    400,
                    f"'tools': definition '{name}' has several schemas, which is not supported",
                    param="tools",
                )
            defs[name] = sub
        variants.append(
            {
                "properties": {
                    "name": {"type": "string", "enum": [tool.function.name]},
                    "parameters": params,
                },
                "required": ["name", "parameters"],
            }
        )
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": variants},
    }
    if parallel is False:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def load_parser(name: str, stage: str) -> type:
    """vLLM's tool-call parser class registered as ``name``; an unknown name is a config error
    naming the stage's ``engine_args.tool_call_parser``."""
    from vllm.tool_parsers import ToolParserManager

    try:
        parser: type = ToolParserManager.get_tool_parser(name)
    except KeyError:
        known = ", ".join(ToolParserManager.list_registered())
        raise ConfigError(
            [
                f"stage '{stage}': engine_args.tool_call_parser '{name}' is not one of vLLM's "
                f"tool parsers ({known})"
            ]
        ) from None
    return parser


def call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


@dataclass
class ToolCalling:
    """One request's tool calling: what its answers' text turns into."""

    tools: list[ToolDef]
    choice: ToolChoice
    parser: type | None = None  # vLLM's parser class (``auto``)
    tokenizer: Any = None
    vllm_request: Any = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        tools: list[ToolDef] | None,
        choice: ToolChoice | None,
        parser: type | None,
        tokenizer: Any,
        parser_name: str,
    ) -> ToolCalling | None:
        """None when the request has no tools (checked by :func:`check_tools` when parsed); a
        tool choice other than ``none`` without a parser is a 400, as on vLLM 0.32's server
        without ``--tool-call-parser``."""
        if not tools:
            return None
        choice = effective_choice(tools, choice)
        if choice != "none" and parser is None:
            what = (
                f'function "{choice.function.name}"'
                if isinstance(choice, NamedToolChoice)
                else f'"{choice}"'
            )
            raise ApiError(
                400,
                f"'tool_choice': tool_choice={what} needs a tool-call parser: set "
                f"engine_args.tool_call_parser of the pipeline's first stage ({parser_name})",
                param="tool_choice",
            )
        return cls(tools, choice, parser, tokenizer)

    @property
    def named(self) -> str | None:
        return self.choice.function.name if isinstance(self.choice, NamedToolChoice) else None

    def _request(self) -> Any:
        """vLLM's own request object, which its parsers read (built once, in a worker thread)."""
        if self.vllm_request is None:
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

            self.vllm_request = ChatCompletionRequest(
                model="omni",
                messages=[{"role": "user", "content": ""}],
                tools=[t.model_dump(exclude_none=True) for t in self.tools],
                tool_choice="auto",
            )
        return self.vllm_request

    def vllm_adjustments(self) -> dict[str, Any]:
        """The sampling fields vLLM's parser changes in a request whose answer it reads (its
        ``adjust_request``: hermes keeps special tokens, its markers may be special ones);
        blocking."""
        if self.parser is None or self.choice == "none":
            return {}
        request = self._request()
        before = request.skip_special_tokens
        adjusted = self.parser(self.tokenizer, request.tools).adjust_request(request.model_copy())
        after = adjusted.skip_special_tokens
        return {} if after == before else {"skip_special_tokens": after}

    def whole(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """A whole answer's content and tool calls (OpenAI's shapes); blocking."""
        if self.choice == "none":
            return text, []
        if self.named is not None:
            if not text.strip():
                return "", []
            return "", [_call(self.named, text)]
        if self.choice == "required":
            return "", [_call(c["name"], json.dumps(c["parameters"])) for c in _required(text)]
        assert self.parser is not None and self.choice == "auto"
        request = self._request()
        info = self.parser(self.tokenizer, request.tools).extract_tool_calls(text, request)
        if not info.tools_called:
            return text, []
        calls = [_call(c.function.name, c.function.arguments, c.id) for c in info.tool_calls]
        content = info.content if info.content and info.content.strip() else None
        return content, calls

    def finish_reason(self, reason: str | None, called: bool) -> str:
        if called and self.named is None and (self.choice == "auto" or reason == "stop"):
            return "tool_calls"
        return reason or "stop"

    def streamer(self) -> ToolStream:
        return ToolStream(self)


def _call(name: str, arguments: str, cid: str | None = None) -> dict[str, Any]:
    return {
        "id": cid or call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _required(text: str) -> list[dict[str, Any]]:
    """The calls of a ``required`` answer (a JSON array of ``{"name", "parameters"}``); an
    answer cut short (the length limit) has none, as in vLLM."""
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [
        c
        for c in value
        if isinstance(c, dict) and isinstance(c.get("name"), str) and "parameters" in c
    ]


class ToolStream:
    """One choice's streamed tool calls: each text delta becomes a delta of ``content`` and/or
    ``tool_calls`` (OpenAI's shapes)."""

    def __init__(self, calling: ToolCalling) -> None:
        self.calling = calling
        self.text = ""
        self.called = False
        self.pos = 0  # required: where the array's next element starts
        self.sent = 0  # required: calls sent
        parser = calling.parser if calling.choice == "auto" else None
        self.parser = parser(calling.tokenizer, None) if parser is not None else None

    async def delta(self, text: str, token_ids: list[int]) -> dict[str, Any]:
        previous, self.text = self.text, self.text + text
        calling = self.calling
        if calling.choice == "none":
            return {"content": text}
        if calling.named is not None:
            if not text:
                return {}
            piece: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
            if not self.called:
                self.called = True
                piece = {"id": call_id(), "type": "function", "index": 0,
                         "function": {"name": calling.named, "arguments": text}}  # fmt: skip
            return {"tool_calls": [piece]}
        if calling.choice == "required":
            return self._required_calls()
        return await asyncio.to_thread(self._parse, previous, text, token_ids)

    def _required_calls(self) -> dict[str, Any]:
        """``required``'s array, a call each time one of its elements is whole (each call in
        one piece: its id, name and arguments)."""
        text, pos, pieces = self.text, self.pos, []
        if pos == 0:
            start = len(text) - len(text.lstrip())
            if start >= len(text) or text[start] != "[":
                return {}
            pos = start + 1
        decoder = json.JSONDecoder()
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                break
            try:
                value, end = decoder.raw_decode(text, pos)
            except ValueError:
                break  # not whole yet
            pos = end
            if isinstance(value, dict) and isinstance(value.get("name"), str):
                arguments = json.dumps(value.get("parameters", {}))
                pieces.append({**_call(value["name"], arguments), "index": self.sent})
                self.sent += 1
        self.pos = pos
        self.called = self.called or bool(pieces)
        return {"tool_calls": pieces} if pieces else {}

    def _parse(self, previous: str, text: str, token_ids: list[int]) -> dict[str, Any]:
        assert self.parser is not None
        request = self.calling._request()
        self.parser.tools = list(request.tools)
        message = self.parser.extract_tool_calls_streaming(
            previous, self.text, text, [], [], token_ids, request
        )
        if message is None:
            return {}
        out: dict[str, Any] = message.model_dump(exclude_none=True, exclude_unset=True)
        out = {k: v for k, v in out.items() if k in ("content", "tool_calls") and v}
        if out.get("tool_calls"):
            self.called = True
        return out

    async def finish(self) -> dict[str, Any]:
        """The last delta of the choice: ``required``'s calls (whole), the rest of an ``auto``
        call's arguments the parser had not streamed yet (vLLM's)."""
        if self.calling.choice == "required":
            return self._required_calls()
        if self.parser is not None and self.called:
            rest = await asyncio.to_thread(self.parser.get_remaining_unstreamed_args)
            if rest:
                index = max(len(self.parser.prev_tool_call_arr) - 1, 0)
                return {"tool_calls": [{"index": index, "function": {"arguments": rest}}]}
        return {}
