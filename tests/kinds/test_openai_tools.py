"""Tool calling through ``omni serve`` on the tiny thinker (one vLLM stage, vLLM's ``hermes``
tool-call parser) with the official ``openai`` client: a call round-trips (assistant tool call ->
tool message -> answer), whole and streamed; ``required`` and a named function are forced through
structured output, so even the random model emits a well-formed call."""

from __future__ import annotations

import json

import openai
import pytest

from tests.kinds.openai_helpers import MODEL, omni_client

pytestmark = pytest.mark.timeout(300)  # the module starts one real vLLM stage (slow under load)

CITIES = ["Paris", "Rome"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": CITIES}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "what is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client():
    with omni_client(timeout=120) as made:
        yield made


def ask(client, stream, **fields):
    messages = fields.pop("messages", ASK)
    body = {"model": MODEL, "max_tokens": 40, "temperature": 0, "tools": TOOLS, **fields}
    if not stream:
        got = client.chat.completions.create(messages=messages, **body)
        choice = got.choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls]
        return choice.message.content, calls, choice.finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(messages=messages, stream=True, **body):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for piece in ch.delta.tool_calls or ():
                call = calls.setdefault(piece.index, ["", "", ""])
                call[0] = piece.id or call[0]
                call[1] += (piece.function and piece.function.name) or ""
                call[2] += (piece.function and piece.function.arguments) or ""
            finish = ch.finish_reason or finish
    return content, [tuple(calls[i]) for i in sorted(calls)], finish


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_call_round_trips(client, stream):
    _, calls, finish = ask(client, stream, tool_choice=NAMED)
    assert len(calls) == 1 and finish == "stop"  # OpenAI's and vLLM's: "stop" for a named call
    cid, name, arguments = calls[0]
    assert cid.startswith("chatcmpl-tool-") and name == "get_weather"
    assert json.loads(arguments)["city"] in CITIES
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": cid, "content": "sunny, 24 degrees"},
    ]
    # the answer: "auto" through the hermes parser (the random model writes no <tool_call>)
    content, calls, finish = ask(client, stream, messages=history, max_tokens=6)
    assert calls == [] and content and finish == "length"
    plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
    answered = client.chat.completions.create(model=MODEL, messages=history, max_tokens=1)
    assert answered.usage.prompt_tokens > plain.usage.prompt_tokens + 5  # the tool turn rendered


@pytest.mark.parametrize("stream", [False, True])
def test_required_calls_a_tool(client, stream):
    _, calls, finish = ask(client, stream, tool_choice="required", max_tokens=200)
    assert calls and finish == "tool_calls"
    for _, name, arguments in calls:
        assert name in ("get_weather", "get_time")
        assert isinstance(json.loads(arguments), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_none_gives_no_call(client, stream):
    content, calls, finish = ask(client, stream, tool_choice="none", max_tokens=6)
    assert calls == [] and content and finish == "length"


def test_bad_tools_schema_is_a_400_naming_the_field(client):
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=ASK, tools=bad)
    assert "tools[0].function.parameters" in str(err.value)


HERMES_ANSWER = (
    'ok <tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
)


def test_auto_reads_calls_with_vllms_parser_whole_and_streamed():
    """vLLM's hermes parser on an answer that holds a call (the random model writes none)."""
    import asyncio

    from omni_core.serve.tools import ToolCalling, ToolDef, load_parser

    tools = [ToolDef.model_validate(t) for t in TOOLS]
    calling = ToolCalling.of(tools, "auto", load_parser("hermes", "thinker"), object(), "")
    assert calling is not None
    content, calls = calling.whole(HERMES_ANSWER)
    assert content == "ok " and [c["function"]["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome"}
    assert calling.finish_reason("stop", True) == "tool_calls"
    assert calling.whole("no call here") == ("no call here", [])
    assert calling.vllm_adjustments() == {"skip_special_tokens": False}  # hermes' adjust_request

    async def streamed():
        stream = calling.streamer()
        deltas = [await stream.delta(HERMES_ANSWER[i : i + 4], []) for i in range(0, 80, 4)]
        return stream, [*deltas, await stream.finish()]

    stream, deltas = asyncio.run(streamed())
    pieces = [p for d in deltas for p in d.get("tool_calls", [])]
    assert stream.called and pieces[0]["function"]["name"] == "get_weather"
    arguments = "".join(p["function"].get("arguments") or "" for p in pieces)
    assert json.loads(arguments) == {"city": "Rome"}
    assert "".join(d.get("content", "") for d in deltas).strip() == "ok"


TOOL_TEMPLATE = (
    "{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[call {{ c.id }} {{ c.function.name }}"
    " city={{ c.function.arguments.city }}]{% endfor %}"
    "{% if m.tool_call_id %}[answers {{ m.tool_call_id }}]{% endif %}{% endfor %}"
)


def test_tool_turns_reach_the_chat_template_as_in_vllm():
    """tools, an assistant's tool_calls (arguments as a mapping) and a tool message's
    tool_call_id reach the template (tiny-thinker's own template renders content only)."""
    from omni_core.chat import ChatOptions, parse_messages
    from tests.kinds.test_chat_render import renderer

    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}  # fmt: skip
    messages = parse_messages(
        [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    text = (
        renderer(chat_template=TOOL_TEMPLATE).render_chat(messages, ChatOptions(tools=TOOLS)).text
    )
    assert "[tool get_weather][tool get_time]" in text
    assert "[call c1 get_weather city=Rome]" in text
    assert "<tool>sunny[answers c1]" in text


# vLLM 0.32's own request checks (issue 30, item 3) on the same server


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 513}, "max_tokens"),
        ({"max_completion_tokens": 600}, "max_completion_tokens"),
        ({"n": 2, "temperature": 0}, "n"),
    ],
)
def test_validation_as_vllm(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=ASK, **fields)
    assert err.value.body["param"] == param
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="hi", extra_body=fields)


def test_max_tokens_up_to_the_context_clamps_as_vllm(client):
    got = client.completions.create(
        model=MODEL, prompt="hi", max_tokens=512, extra_body={"ignore_eos": True}
    )
    assert got.usage.prompt_tokens + got.usage.completion_tokens == 512


# several prompts in one completions request (issue 30, item 2) on the same server

PROMPTS = [[1, 40, 41, 42], [1, 50, 51]]


def _texts_by_index(stream) -> tuple[dict[int, str], dict[int, str], object]:
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
        usage = chunk.usage or usage
    return texts, finish, usage


def test_several_prompts_are_a_run_each_greedy(client):
    alone = [
        client.completions.create(model=MODEL, prompt=p, max_tokens=6, temperature=0)
        for p in PROMPTS
    ]
    got = client.completions.create(model=MODEL, prompt=PROMPTS, max_tokens=6, temperature=0)
    assert [c.index for c in got.choices] == [0, 1]
    assert [c.text for c in got.choices] == [a.choices[0].text for a in alone]
    assert got.usage.prompt_tokens == sum(len(p) for p in PROMPTS) == 7
    assert got.usage.completion_tokens == 12
    streamed = client.completions.create(
        model=MODEL, prompt=PROMPTS, max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    texts, finish, usage = _texts_by_index(streamed)
    assert texts == {0: alone[0].choices[0].text, 1: alone[1].choices[0].text}
    assert finish == {0: "length", 1: "length"}
    assert usage.prompt_tokens == 7 and usage.completion_tokens == 12


def test_several_prompts_with_n_index_prompt_times_n_plus_sample(client):
    fields = {"max_tokens": 5, "n": 2, "seed": 7, "temperature": 1.0}
    alone = [client.completions.create(model=MODEL, prompt=p, **fields) for p in PROMPTS]
    want = {i * 2 + j: a.choices[j].text for i, a in enumerate(alone) for j in range(2)}
    got = client.completions.create(model=MODEL, prompt=PROMPTS, echo=True, **fields)
    assert {c.index: c.text for c in got.choices} == {
        k: client_text(PROMPTS[k // 2]) + v for k, v in want.items()
    }
    streamed = client.completions.create(model=MODEL, prompt=PROMPTS, stream=True, **fields)
    texts, finish, _ = _texts_by_index(streamed)
    assert texts == want and sorted(finish) == [0, 1, 2, 3]


def client_text(ids: list[int]) -> str:
    from transformers import AutoTokenizer

    from omni_core.config.settings import OmniSettings
    from omni_core.models import resolve_model

    path = resolve_model("tiny-thinker", OmniSettings().cache_dir)
    return AutoTokenizer.from_pretrained(path).decode(ids)


def test_an_unknown_tool_call_parser_is_a_config_error_naming_it():
    from omni_core.errors import ConfigError
    from omni_core.serve.tools import load_parser

    with pytest.raises(ConfigError, match="tool_call_parser 'nope'.*hermes"):
        load_parser("nope", "thinker")
