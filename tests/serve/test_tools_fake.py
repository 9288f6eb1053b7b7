"""Tool calling's request checks on ``omni serve`` with a scripted first stage (no real model):
what is a 400 (naming the field), ``tool_choice: none``, tool turns in the history."""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import running_server

PIPE = """
name: fake-chat
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 5}, final_output: true}
"""
HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {"id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


@pytest.fixture(scope="module")
def base():
    with running_server(PIPE) as (url, _, _):
        yield url


def chat(base: str, **body) -> httpx.Response:
    body = {"model": "fake-chat", "messages": HI, **body}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"tools": TOOLS}, "tool_choice", "tool_call_parser"),  # default "auto": needs a parser
        ({"tools": TOOLS, "tool_choice": "auto"}, "tool_choice", "tool_call_parser"),
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice", "tool_call_parser"),
        (
            {
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            "tool_choice",
            "tool_call_parser",
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "'nope'",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]},
            "tools",
            "tools[0].function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools",
            "tools[0].function.parameters",
        ),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "tools[0]"),
        (
            {"tools": [{"function": {"name": "f", "parameters": {"$schema": []}}}]},
            "tools",
            "tools[0].function.parameters.$schema",
        ),
        (
            {"messages": [*HI, {"role": "tool", "content": "sunny"}]},
            "messages",
            "tool_call_id",
        ),
        (
            {"messages": [*HI, {"role": "user", "content": "x", "tool_calls": [CALL]}]},
            "messages",
            "tool_calls",
        ),
        ({"functions": [{"name": "f"}]}, "functions", "'tools'"),
    ],
)
def test_bad_tool_requests_are_400_naming_the_field(base, body, param, words):
    got = chat(base, **body)
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_tools_on_completions_are_an_unknown_field(base):
    body = {"model": "fake-chat", "prompt": "hi", "tools": TOOLS}
    got = httpx.post(f"{base}/v1/completions", json=body, timeout=30)
    assert got.status_code == 400 and "unknown field" in got.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_none_and_a_tool_turn_in_the_history(base, stream):
    history = [
        *HI,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call-1", "content": "sunny"},
    ]
    got = chat(base, messages=history, tools=TOOLS, tool_choice="none", stream=stream)
    assert got.status_code == 200, got.text
    if not stream:
        choice = got.json()["choices"][0]
        assert choice["message"]["tool_calls"] == [] and choice["message"]["content"]
        assert choice["finish_reason"] in ("stop", "length")
    else:
        assert '"tool_calls"' not in got.text and '"content"' in got.text


def complete(base: str, **body) -> httpx.Response:
    body = {"model": "fake-chat", **body}
    return httpx.post(f"{base}/v1/completions", json=body, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_several_prompts_give_choice_i_times_n_plus_j(base, stream):
    got = complete(base, prompt=["a", "bb", "ccc"], n=2, stream=stream)
    assert got.status_code == 200, got.text
    if not stream:
        assert [c["index"] for c in got.json()["choices"]] == list(range(6))
    else:
        closing = [line for line in got.text.splitlines() if '"finish_reason":"' in line]
        assert sorted(int(line.split('"index":')[1].split(",")[0]) for line in closing) == list(
            range(6)
        )
    again = complete(base, prompt="a")  # every slot came back
    assert again.status_code == 200


def test_an_empty_prompt_among_several_is_a_400(base):
    got = complete(base, prompt=["a", ""])
    assert got.status_code == 400 and "'prompt[1]'" in got.json()["error"]["message"]


def test_required_streams_each_call_once_its_element_is_whole():
    import asyncio

    from omni_core.serve.tools import ToolCalling, ToolDef

    tools = [ToolDef.model_validate(t) for t in TOOLS]
    text = '[ {"name": "get_weather", "parameters": {"city": "]"}},\n{"name": "get_weather", '
    text += '"parameters": {}}' + " " * 20 + "]"
    calling = ToolCalling(tools, "required")

    async def streamed():
        stream = calling.streamer()
        deltas = [(i, await stream.delta(text[i : i + 5], [])) for i in range(0, len(text), 5)]
        return stream, [(i, d) for i, d in deltas if d], await stream.finish()

    stream, deltas, last = asyncio.run(streamed())
    assert stream.called and last == {}
    closes = [text.index("}},") + 2, text.index("}}  ") + 2]  # where each element is whole
    assert [i for i, _ in deltas] == [(c - 1) // 5 * 5 for c in closes]  # not at the end
    calls = [d["tool_calls"][0] for _, d in deltas]
    assert [c["index"] for c in calls] == [0, 1]
    assert [c["function"]["arguments"] for c in calls] == ['{"city": "]"}', "{}"]
    assert calling.finish_reason("stop", True) == "tool_calls"
