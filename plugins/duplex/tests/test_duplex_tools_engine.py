"""Tools in realtime sessions on a real vLLM thinker (issue 29 item 7): the tiny thinker as a
duplex pipeline (the ``chat`` plug, vLLM's ``hermes`` tool-call parser) driven by the official
``openai`` package's realtime client. A named or ``required`` tool choice is forced through
structured output, so the random model emits a call whose arguments fit the schema; the call's
``function_call_output`` reaches the next response's prompt as the chat template's tool message.
One server for the module."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import openai
import pytest
from omni_core.testing.server import running_server

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

MODEL = "tiny-thinker-duplex"
PIPE = f"""
name: {MODEL}
engine: duplex
requires_plugins: [duplex]
duplex: {{model: chat, vad: energy}}
stages:
  - id: 0
    name: thinker
    kind: vllm
    engine_args: {{model: tiny-thinker, max_model_len: 512, tool_call_parser: hermes}}
    sampling_params: {{max_tokens: 48, temperature: 0, seed: 0}}
    final_output: true
    final_output_type: text
"""
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
ZONE = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "a city's weather",
     "parameters": CITY},
    {"type": "function", "name": "get_time", "parameters": ZONE},
]  # fmt: skip
SCHEMAS = {"get_weather": CITY, "get_time": ZONE}
TEXT = {"type": "realtime", "output_modalities": ["text"],
        "audio": {"input": {"turn_detection": None}}}  # fmt: skip
ANSWER = "sunny, 24 degrees"


class Prompts:
    """The thinker prompts of every response (wrapping the engine's shared plug)."""

    def __init__(self, engine: Any) -> None:
        model = engine.orchestrator.sessions.model
        self.decode = engine.prompt_renderer.decode
        self.lock = threading.Lock()
        self.seen: list[Any] = []
        plan = model.plan_response

        def recording(context: Any) -> Any:
            result = plan(context)
            with self.lock:
                self.seen.append(result.prompt)
            return result

        model.plan_response = recording

    def last(self) -> str:
        with self.lock:
            return str(self.decode(self.seen[-1]))


@pytest.fixture(scope="module")
def served():
    with running_server(PIPE, entry_points=True) as (base, engine, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=120)
        yield client, Prompts(engine)


def until(conn: Any, *types: str) -> list[Any]:
    seen = []
    while True:
        event = conn.recv()
        seen.append(event)
        if event.type in types:
            return seen


def ask(conn: Any, session: dict[str, Any], question: str) -> list[Any]:
    conn.session.update(session={**TEXT, **session})
    assert until(conn, "session.updated", "error")[-1].type == "session.updated"
    conn.conversation.item.create(
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": question}],
        }
    )
    conn.response.create()
    return until(conn, "response.done", "error")


def calls_of(seen: list[Any]) -> list[tuple[str, str, str]]:
    """The function calls of a response, checked event by event: added, deltas, done, done."""
    added = [e.item for e in seen if e.type == "response.output_item.added"]
    calls = []
    for item in added:
        assert item.type == "function_call" and item.status == "in_progress"
        deltas = "".join(
            e.delta
            for e in seen
            if e.type == "response.function_call_arguments.delta" and e.item_id == item.id
        )
        (done,) = [
            e
            for e in seen
            if e.type == "response.function_call_arguments.done" and e.item_id == item.id
        ]
        (item_done,) = [
            e.item for e in seen if e.type == "response.output_item.done" and e.item.id == item.id
        ]
        assert done.call_id == item.call_id and done.name == item.name
        assert done.arguments == deltas == item_done.arguments and item_done.status == "completed"
        jsonschema.validate(json.loads(done.arguments), SCHEMAS[item.name])
        calls.append((item.call_id, item.name, done.arguments))
    response = seen[-1].response
    assert response.status == "completed"
    assert [(o.call_id, o.name, o.arguments) for o in response.output] == calls
    return calls


def test_a_named_call_round_trips_to_a_reply_whose_prompt_holds_the_output(served):
    client, prompts = served
    with client.realtime.connect(model=MODEL) as conn:
        assert conn.recv().type == "session.created"
        named = {"type": "function", "name": "get_weather"}
        seen = ask(conn, {"tools": TOOLS, "tool_choice": named}, "Weather in Paris?")
        ((call_id, name, _),) = calls_of(seen)
        assert name == "get_weather"
        assert "response.output_text.delta" not in [e.type for e in seen]  # the JSON is the call
        conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": call_id, "output": ANSWER}
        )
        added = until(conn, "conversation.item.done", "error")[-1]
        assert added.type == "conversation.item.done" and added.item.call_id == call_id
        assert ANSWER not in prompts.last()
        conn.session.update(session={"tool_choice": "auto"})  # hermes reads the reply's text
        until(conn, "session.updated")
        conn.response.create()
        reply = until(conn, "response.done", "error")
    done = reply[-1]
    assert done.type == "response.done" and done.response.status == "completed", done
    assert "response.output_text.delta" in [e.type for e in reply]
    assert ANSWER in prompts.last()  # the tool message, rendered by the chat template


def test_required_calls_a_tool_with_valid_arguments(served):
    client, _ = served
    with client.realtime.connect(model=MODEL) as conn:
        conn.recv()
        seen = ask(
            conn,
            {"tools": TOOLS, "tool_choice": "required", "max_output_tokens": 200},
            "What time is it?",
        )
        calls = calls_of(seen)
    assert calls and all(name in SCHEMAS for _, name, _ in calls)


def test_a_bad_tool_is_one_error_naming_the_field_and_the_socket_stays(served):
    client, _ = served
    bad = [{"type": "function", "name": "f", "parameters": {"type": "objekt"}}]
    with client.realtime.connect(model=MODEL) as conn:
        conn.recv()
        conn.session.update(session={**TEXT, "tools": bad})
        error = until(conn, "error", "session.updated")[-1]
        assert error.type == "error" and "'session.tools[0].parameters'" in error.error.message
        conn.session.update(session={**TEXT, "tools": TOOLS})
        assert until(conn, "error", "session.updated")[-1].type == "session.updated"


def test_a_long_chat_leaves_out_its_oldest_turns_and_a_too_long_turn_fails_alone(served):
    """Issue 34 item 3 on the ``chat`` plug (the whole conversation re-rendered each response):
    past ``max_model_len`` (512 here) the oldest items are left out of the prompt (the 3rd of
    these turns was refused before, and every one after it); a turn too long alone is one error,
    it leaves the conversation, and the next turn works."""
    client, prompts = served
    statuses, errors = [], []
    with client.realtime.connect(model=MODEL) as conn:
        conn.recv()
        for i in range(6):
            seen = ask(conn, {}, f"Turn {i}: " + "hello " * 120)
            errors += [e for e in seen if e.type == "error"]
            statuses.append(seen[-1].response.status if seen[-1].type == "response.done" else "")
        last = prompts.last()
        too_long = ask(conn, {}, "hello " * 600)
        seen = ask(conn, {}, "hi")
    assert statuses == ["completed"] * 6 and errors == [], (statuses, errors)
    assert "Turn 5:" in last and "Turn 0:" not in last
    (error,) = [e for e in too_long if e.type == "error"]
    assert error.error.code == "input_rejected" and "max_model_len" in error.error.message
    assert seen[-1].type == "response.done" and seen[-1].response.status == "completed"
    assert "hello " * 200 not in prompts.last() and "Turn 5:" in prompts.last()
