"""Tools in realtime sessions without an engine of a real model: the client events, the checks of
``tools``/``tool_choice`` (one error naming the field), the ``chat`` plug's conversation, and a
whole tool round trip on scripted stages whose text is a canned ``hermes`` answer, read by vLLM's
hermes parser through the session's own path (``tool_choice`` auto)."""

from __future__ import annotations

import json

import pytest
from duplex_helpers import of_type, pipeline, until
from omni_core import hookimpl

import omni_duplex.plugin as duplex_plugin
from omni_duplex import protocol as P
from omni_duplex.chat import conversation
from omni_duplex.client_events import ClientEventError, commands_from_event
from omni_duplex.config import SessionConfig, parse_session_config
from omni_duplex.errors import DuplexError
from omni_duplex.model import Delta, DuplexModelSpec, ResponseContext, TinyOmniModel, UserTurn

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "a city's weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
HERMES_ANSWER = (
    'ok <tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
)


# --- client events ------------------------------------------------------------------------------
def test_session_update_carries_tools_and_tool_choice():
    (cmd,) = commands_from_event(
        {
            "type": "session.update",
            "session": {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
        }
    )
    assert isinstance(cmd, P.UpdateSession)
    assert cmd.session == {
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "x"},
    }
    (cmd,) = commands_from_event({"type": "session.update", "session": {"tools": None}})
    assert cmd.session == {"tools": []}


def test_a_function_call_output_item_is_a_tool_output_command():
    item = {"type": "function_call_output", "call_id": "c1", "output": "sunny", "id": "i1"}
    (cmd,) = commands_from_event({"type": "conversation.item.create", "item": item})
    assert cmd == P.ToolOutput(call_id="c1", output="sunny", item_id="i1")


@pytest.mark.parametrize(
    ("event", "where"),
    [
        (
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "output": "x"},
            },
            "'item.call_id'",
        ),
        (
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "c", "output": 3},
            },
            "'item.output'",
        ),
        ({"type": "session.update", "session": {"tools": {"a": 1}}}, "'session.tools'"),
        ({"type": "session.update", "session": {"tool_choice": 3}}, "'session.tool_choice"),
    ],
)
def test_malformed_tool_events_name_the_field(event, where):
    with pytest.raises(ClientEventError) as err:
        commands_from_event(event)
    assert where in err.value.message


# --- the checks of tools and tool_choice ---------------------------------------------------------
@pytest.mark.parametrize(
    ("session", "where"),
    [
        ({"tools": [{**WEATHER, "name": "has space"}]}, "'session.tools[0].name'"),
        ({"tools": [{**WEATHER, "parameters": {"type": "objekt"}}]}, "'session.tools[0].parameters'"),
        ({"tools": [WEATHER, {**WEATHER, "strict": True, "x": 1}]}, "'session.tools[1].strict'"),
        ({"tools": [{**WEATHER, "type": "mcp"}]}, "'session.tools[0].type'"),
        ({"tools": [WEATHER, WEATHER]}, "'session.tools[1].name'"),
        ({"tools": ["get_weather"]}, "'session.tools[0]'"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "'session.tool_choice'"),
        ({"tool_choice": "required"}, "'session.tool_choice'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "f"}},
         "'session.tool_choice.name'"),
    ],
)  # fmt: skip
def test_a_bad_tool_or_choice_is_one_error_naming_the_field(session, where):
    with pytest.raises(DuplexError) as err:
        SessionConfig().updated(session)
    assert err.value.code == "invalid_session_config" and where in err.value.message


def test_good_tools_are_kept_in_the_realtime_shape():
    named = {"type": "function", "name": "get_weather"}
    config = parse_session_config({"tools": [WEATHER], "tool_choice": named})
    assert config.public()["tools"] == [WEATHER] and config.public()["tool_choice"] == named
    assert SessionConfig().tool_choice == "auto" and SessionConfig().tools == []


# --- the chat plug's conversation ----------------------------------------------------------------
def test_calls_and_outputs_become_the_chat_messages_of_a_tool_turn():
    history = [
        {"role": "user", "item_id": "u", "text": "weather in Rome and Paris?"},
        {"role": "assistant", "item_id": "a", "text": "let me look"},
        {"role": "assistant", "item_id": "c1", "text": '{"city": "Rome"}',
         "type": "function_call", "call_id": "k1", "name": "get_weather"},
        {"role": "assistant", "item_id": "c2", "text": '{"city": "Paris"}',
         "type": "function_call", "call_id": "k2", "name": "get_weather"},
        {"role": "tool", "item_id": "o1", "text": "sunny", "type": "function_call_output",
         "call_id": "k1"},
    ]  # fmt: skip
    context = ResponseContext(
        SessionConfig(instructions="be brief"), [UserTurn("t", None, "thanks")], history
    )
    call = lambda cid, city: {  # noqa: E731
        "id": cid,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
    }
    assert conversation(context) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Rome and Paris?"},
        {"role": "assistant", "content": "let me look"},
        {"role": "assistant", "content": None, "tool_calls": [call("k1", "Rome"), call("k2", "Paris")]},
        {"role": "tool", "tool_call_id": "k1", "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip


# --- a round trip on scripted stages (tool_choice auto, vLLM's hermes parser) --------------------
class CannedHermes(TinyOmniModel):
    """The scripted thinker's first text output becomes :data:`HERMES_ANSWER`, in 4-character
    deltas; tools go through vLLM's hermes parser. Records each response's context."""

    name = "test-tools"
    supports_tools = True

    def __init__(self, parser):
        self.parser = parser
        self.contexts = []
        self.answered = set()

    def tool_parser(self):
        return self.parser, object(), "test"

    def plan_response(self, context):
        self.contexts.append(context)
        return super().plan_response(context)

    def project(self, output):
        if output.output_type != "text" or not output.text or output.request_id in self.answered:
            return []
        self.answered.add(output.request_id)
        text = HERMES_ANSWER
        return [Delta("text", text[i : i + 4]) for i in range(0, len(text), 4)]


class ToolsPlugin:
    OMNI_PLUGIN_API_VERSION = 2

    def __init__(self, model):
        self.model = model

    @hookimpl
    def omni_duplex_register_models(self):
        return [DuplexModelSpec("test-tools", lambda pipeline, section: self.model, "hermes")]


@pytest.fixture
def canned(make_engine, fake_entry_points):
    import vllm.entrypoints.openai.chat_completion.protocol  # noqa: F401  (what the parser reads)
    from omni_core.extend import load_parser

    model = CannedHermes(load_parser("hermes", "thinker"))
    fake_entry_points.add("duplex", duplex_plugin, distribution="omni-duplex", version="0.1.0")
    fake_entry_points.add("duplex-tools-test", ToolsPlugin(model), distribution="duplex-tests")
    return make_engine(pipeline(section="{model: test-tools, vad: energy}")), model


TEXT_ONLY = {"turn_detection": None, "output_modalities": ["text"]}


@pytest.mark.engine  # no engine of a model, but vLLM's parser: the vllm extra (~7 s CPU import)
async def test_auto_reads_a_hermes_call_into_function_call_events_and_the_output_answers_it(
    canned,
):
    engine, model = canned
    session = await engine.open_session(TEXT_ONLY)
    await until(session, of_type(P.SESSION_CREATED))
    session.send(P.UpdateSession(session={"tools": [WEATHER]}))  # tool_choice: auto
    await until(session, of_type(P.SESSION_UPDATED))
    session.send(P.AppendText(text="weather in Rome?", commit=True))
    session.send(P.CreateResponse())
    events = await until(session, of_type(P.RESPONSE_DONE))
    by = {}
    for e in events:
        by.setdefault(e.type, []).append(e.data)
    assert "".join(d["delta"] for d in by[P.TEXT_DELTA]).strip() == "ok"
    ((added,),) = [by[P.OUTPUT_ITEM_ADDED]]
    item = added["item"]
    assert item["type"] == "function_call" and item["name"] == "get_weather"
    assert added["output_index"] == 1  # after the message the content went to
    arguments = "".join(d["delta"] for d in by[P.FUNCTION_CALL_ARGUMENTS_DELTA])
    assert json.loads(arguments) == {"city": "Rome"}
    ((done,),) = [by[P.FUNCTION_CALL_ARGUMENTS_DONE]]
    assert done["arguments"] == arguments and done["call_id"] == item["call_id"]
    ((item_done,),) = [by[P.OUTPUT_ITEM_DONE]]
    assert item_done["item"]["status"] == "completed"
    response = events[-1].data
    assert response["status"] == "completed" and response["text"].strip() == "ok"
    assert [c["call_id"] for c in response["calls"]] == [item["call_id"]]

    session.send(P.ToolOutput(call_id="nope", output="x", event_id="e1"))
    error = (await until(session, of_type(P.ERROR)))[-1]
    assert "'item.call_id'" in error.data["message"] and error.data["event_id"] == "e1"
    session.send(P.ToolOutput(call_id=item["call_id"], output="sunny"))
    await until(session, of_type(P.ITEM_DONE))
    session.send(P.CreateResponse())
    await until(session, of_type(P.RESPONSE_DONE))
    kinds = [(h.get("type", "message"), h["text"]) for h in model.contexts[-1].history]
    assert kinds == [
        ("message", "weather in Rome?"),
        ("message", "ok "),
        ("function_call", arguments),
        ("function_call_output", "sunny"),
    ]
    rendered = conversation(model.contexts[-1])
    assert rendered[-1] == {"role": "tool", "tool_call_id": item["call_id"], "content": "sunny"}
    await session.close()


@pytest.mark.engine  # vLLM's parser, as above
async def test_a_failing_tool_parser_fails_that_response_alone(canned, monkeypatch):
    """The parser raising on a reply: one ``error`` and a failed ``response.done``; the session
    takes the next response (it used to keep the failed one open: every later create refused)."""
    from omni_duplex import tools

    engine, _ = canned
    real = tools.on_text

    async def broken(*args, **kwargs):
        raise ValueError("unparsable")

    monkeypatch.setattr(tools, "on_text", broken)
    session = await engine.open_session(TEXT_ONLY)
    await until(session, of_type(P.SESSION_CREATED))
    session.send(P.UpdateSession(session={"tools": [WEATHER]}))
    await until(session, of_type(P.SESSION_UPDATED))
    session.send(P.AppendText(text="weather in Rome?", commit=True))
    session.send(P.CreateResponse())
    events = await until(session, of_type(P.RESPONSE_DONE))
    [error] = [e.data for e in events if e.type == P.ERROR]
    assert error["code"] == "tool_call_error" and "unparsable" in error["message"]
    assert events[-1].data["status"] == "failed"
    monkeypatch.setattr(tools, "on_text", real)
    session.send(P.CreateResponse())
    events = await until(session, of_type(P.RESPONSE_DONE))
    assert events[-1].data["status"] == "completed"
    assert not [e for e in events if e.type == P.ERROR]
    await session.close()


async def test_tools_need_a_plug_that_renders_them(duplex):
    engine = duplex(section="{model: test-voice, vad: energy}")
    session = await engine.open_session(TEXT_ONLY)
    session.send(P.UpdateSession(session={"tools": [WEATHER]}, event_id="u1"))
    error = (await until(session, of_type(P.ERROR)))[-1]
    assert error.data["code"] == "tools_unsupported" and error.data["event_id"] == "u1"
    assert "'session.tools'" in error.data["message"]
    session.send(P.ToolOutput(call_id="c", output="x"))
    error = (await until(session, of_type(P.ERROR)))[-1]
    assert error.data["code"] == "tools_unsupported"
    await session.close()


# --- the end of a response with calls -------------------------------------------------------
class FakeRunner:
    def __init__(self):
        self.events, self.history = [], []

    def emit(self, kind, **data):
        self.events.append((kind, data))

    def _remember(self, role, item_id, text, **more):
        self.history.append({"role": role, "item_id": item_id, "text": text, **more})


def ended(status):
    from omni_duplex.session import _Response
    from omni_duplex.tools import ResponseTools, close_calls, emit, remember_calls

    runner, resp = FakeRunner(), _Response("r", "run", "m", 0)
    resp.tools = ResponseTools(stream=None)
    piece = {"index": 0, "id": "k1", "function": {"name": "get_weather", "arguments": '{"ci'}}
    emit(runner, resp, {"tool_calls": [piece]})
    emit(runner, resp, {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Rome"}'}}]})
    calls = close_calls(runner, resp, status)
    remember_calls(runner, resp)
    return runner, calls


def test_a_completed_call_enters_the_conversation_and_response_done_lists_it():
    from omni_duplex.realtime import to_server_event

    runner, calls = ended("completed")
    kinds = [k for k, _ in runner.events]
    assert kinds == [
        P.OUTPUT_ITEM_ADDED,
        P.FUNCTION_CALL_ARGUMENTS_DELTA,
        P.FUNCTION_CALL_ARGUMENTS_DELTA,
        P.FUNCTION_CALL_ARGUMENTS_DONE,
        P.OUTPUT_ITEM_DONE,
    ]
    assert runner.events[3][1]["arguments"] == '{"city": "Rome"}'
    assert calls[0]["status"] == "completed" and calls[0]["call_id"] == "k1"
    assert [(h["type"], h["call_id"], h["text"]) for h in runner.history] == [
        ("function_call", "k1", '{"city": "Rome"}')
    ]
    data = {"response_id": "r", "item_id": "m", "status": "completed", "reason": "stop",
            "text": "", "audio_ms": 0, "calls": calls}  # fmt: skip
    wire = to_server_event(P.DuplexEvent(P.RESPONSE_DONE, "s", 0, data, 0.0))
    assert wire["response"]["output"] == calls  # no message: the reply is the call


def test_a_cancelled_call_is_incomplete_and_stays_out_of_the_conversation():
    runner, calls = ended("cancelled")
    assert runner.events[-1][1]["item"]["status"] == "incomplete"
    assert calls[0]["status"] == "incomplete" and runner.history == []
