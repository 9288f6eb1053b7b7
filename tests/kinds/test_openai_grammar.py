"""Structured-output grammars through ``omni serve`` on the tiny thinker (one vLLM stage): a
grammar that admits no output is a 400 naming the request's field, whether it comes from
``response_format``, ``structured_outputs`` or a forced tool call, whole or streamed (it was a
200 with ``finish_reason: "error"`` and content ``"!"``); the stage serves on after it."""

from __future__ import annotations

import openai
import pytest

from tests.kinds.openai_helpers import MODEL, omni_client
from tests.kinds.test_openai_differential import MESSAGES

pytestmark = pytest.mark.timeout(300)  # the module starts one real vLLM stage (slow under load)

SELF_REF = {"$ref": "#"}  # a schema that is only itself: no JSON value matches it
TOOL = {"type": "function", "function": {"name": "loop", "parameters": SELF_REF}}
# vLLM finds this one at validation (xgrammar cannot build it), before the engine
IMPOSSIBLE = {"type": "string", "minLength": 5, "maxLength": 2}
BAD_TOOL = {"type": "function", "function": {"name": "bad", "parameters": IMPOSSIBLE}}


@pytest.fixture(scope="module")
def client():
    with omni_client(timeout=60) as made:
        yield made


def chat(client, stream=False, **fields):
    made = client.chat.completions.create(
        model=MODEL, messages=MESSAGES[:2], max_tokens=8, temperature=0, stream=stream, **fields
    )
    return list(made) if stream else made


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": SELF_REF},
                }
            },
            "response_format.json_schema",
        ),
        ({"extra_body": {"structured_outputs": {"json": SELF_REF}}}, "structured_outputs.json"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "loop"}}},
            "tools[0].function.parameters",
        ),
        (
            {"tools": [BAD_TOOL], "tool_choice": {"type": "function", "function": {"name": "bad"}}},
            "tools[0].function.parameters",
        ),
        ({"tools": [BAD_TOOL], "tool_choice": "required"}, "tools"),
    ],
    ids=["response_format", "structured_outputs", "named_tool", "named_bad", "required_bad"],
)
def test_a_grammar_that_admits_nothing_is_a_400_naming_the_field(client, fields, param, stream):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, stream=stream, **fields)
    assert err.value.status_code == 400
    assert err.value.body["message"].startswith(f"'{param}': ")
    assert err.value.body["param"] == param
    # the stage serves on: the same request with a schema that can end answers
    fine = chat(client, response_format={"type": "json_object"})
    assert fine.choices[0].finish_reason in ("stop", "length")


def test_a_completion_grammar_failure_names_structured_outputs(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(
            model=MODEL,
            prompt="hi",
            max_tokens=4,
            extra_body={"structured_outputs": {"json": SELF_REF}},
        )
    assert err.value.body["param"] == "structured_outputs.json"


def test_a_spec_over_the_bounds_is_refused_before_compiling(client):
    choices = [f"option number {i:05d} of many" for i in range(20_000)]  # issue 34's 300 KB
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, extra_body={"structured_outputs": {"choice": choices}})
    assert err.value.body["param"] == "structured_outputs.choice"
    assert "limit" in err.value.message
