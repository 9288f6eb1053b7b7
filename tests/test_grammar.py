"""omni_core.grammar: the bounds on a structured-output spec, checked before anything compiles
it, and the field its errors name."""

from __future__ import annotations

import pytest

from omni_core.grammar import (
    GRAMMAR_FIELD,
    MAX_ALTERNATIVES,
    MAX_GRAMMAR_CHARS,
    GrammarError,
    check_size,
    grammar_field,
    size_problem,
)
from omni_core.sampling import SamplingParams


@pytest.mark.parametrize(
    "spec",
    [
        {"choice": [f"c{i}" for i in range(MAX_ALTERNATIVES)]},
        {"json": {"enum": list(range(MAX_ALTERNATIVES))}},
        {
            "json": {
                "type": "object",
                "properties": {f"p{i}": {"type": "integer"} for i in range(900)},
            }
        },
        {"regex": "a" * MAX_GRAMMAR_CHARS},
        {"json_object": True},
        {"json": '{"type": "object"}'},
        {"json": "not json"},  # vLLM's validation says what is wrong with it
    ],
)
def test_specs_within_the_bounds_pass(spec):
    assert size_problem(spec) is None
    check_size(spec)


@pytest.mark.parametrize(
    ("spec", "kind", "what"),
    [
        ({"choice": [f"c{i}" for i in range(MAX_ALTERNATIVES + 1)]}, "choice", "choices"),
        ({"choice": ["x" * MAX_GRAMMAR_CHARS]}, "choice", "characters"),
        ({"json": {"enum": list(range(MAX_ALTERNATIVES + 1))}}, "json", "alternatives"),
        ({"json": {"anyOf": [{"enum": [1] * 600}, {"oneOf": [{}] * 500}]}}, "json", "alternatives"),
        ({"json": {"properties": {"a" * MAX_GRAMMAR_CHARS: {}}}}, "json", "characters"),
        ({"regex": "|".join("a" * (MAX_ALTERNATIVES + 1))}, "regex", "alternatives"),
        ({"grammar": 'root ::= "' + "a" * MAX_GRAMMAR_CHARS + '"'}, "grammar", "characters"),
    ],
)
def test_specs_over_the_bounds_name_their_kind(spec, kind, what):
    found = size_problem(spec)
    assert found is not None and found[0] == kind and what in found[1]
    with pytest.raises(GrammarError) as err:
        check_size(spec)
    assert err.value.param == f"structured_outputs.{kind}" and err.value.status_code == 400
    with pytest.raises(GrammarError) as err:
        check_size(spec, "response_format.json_schema")
    assert str(err.value).startswith("'response_format.json_schema': ")


def test_deep_schemas_are_counted_without_recursion():
    schema: dict = {"enum": [1, 2]}
    for _ in range(5000):  # deeper than Python's recursion limit
        schema = {"anyOf": [schema]}
    found = size_problem({"json": schema})
    assert found == ("json", "nested too deeply to compile")
    as_text = {"json": "[" * 16_000 + "]" * 16_000}  # a string, within the characters
    assert size_problem(as_text) == ("json", "nested too deeply to compile")


def test_the_field_a_stage_names():
    spec = {"vllm": {"structured_outputs": {"regex": "a+"}}}
    assert grammar_field(SamplingParams(extra=spec)) == "structured_outputs.regex"
    named = {**spec, GRAMMAR_FIELD: "tools[2].function.parameters"}
    assert grammar_field(SamplingParams(extra=named)) == "tools[2].function.parameters"
    assert grammar_field(SamplingParams()) == "structured_outputs"
