"""Sampling params are checked at the edge: finite numbers in the ranges vLLM accepts, one
RequestError naming the field and the value given."""

from __future__ import annotations

import math

import pytest

from omni_core import RequestError, SamplingParams
from omni_core.sampling import MAX_LOGPROBS, SEED_MAX, SEED_MIN

INF, NAN = math.inf, math.nan

BAD = [
    ("temperature", NAN),
    ("temperature", INF),
    ("temperature", -0.1),
    ("temperature", 2.5),
    ("temperature", 1e300),
    ("temperature", "hot"),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("top_p", NAN),
    ("top_k", -2),
    ("top_k", 2**70),
    ("top_k", 1.5),
    ("min_p", -0.1),
    ("min_p", 1.1),
    ("min_p", NAN),
    ("frequency_penalty", 2.5),
    ("frequency_penalty", -INF),
    ("presence_penalty", -2.1),
    ("presence_penalty", NAN),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", INF),
    ("repetition_penalty", NAN),
    ("seed", SEED_MAX + 1),
    ("seed", SEED_MIN - 1),
    ("seed", 2**70),
    ("seed", 1.5),
    ("logprobs", -1),
    ("logprobs", MAX_LOGPROBS + 1),
    ("max_tokens", 0),
    ("max_tokens", 2**70),
    ("n", 0),
    ("stop", [""]),
    ("stop", "x"),
    ("deadline_s", 0.0),
    ("deadline_s", INF),
    ("deadline_s", NAN),
    ("temperature", True),
]

GOOD = [
    ("temperature", 0.0),
    ("temperature", 2.0),
    ("temperature", 1),
    ("top_p", 1.0),
    ("top_p", 1e-9),
    ("top_k", -1),
    ("top_k", 0),
    ("top_k", 50),
    ("min_p", 0.0),
    ("min_p", 1.0),
    ("frequency_penalty", -2.0),
    ("presence_penalty", 2.0),
    ("repetition_penalty", 1e-6),
    ("seed", SEED_MIN),
    ("seed", SEED_MAX),
    ("logprobs", 0),
    ("logprobs", MAX_LOGPROBS),
    ("stop", ["\n", "END"]),
    ("deadline_s", 1e-3),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_a_bad_value_is_refused_naming_the_field(field, value):
    with pytest.raises(RequestError, match=rf"^sampling_params\.{field}\b") as parsed:
        SamplingParams.from_mapping({field: value})
    assert "(value: " in str(parsed.value)  # what was given, for the caller to see
    built = SamplingParams(**{field: value})  # Python-built params skip parsing ...
    with pytest.raises(RequestError, match=rf"^where\.{field}\b"):
        built.validate("where")  # ... and validate() runs the same checks


@pytest.mark.parametrize(("field", "value"), GOOD, ids=[f"{f}={v!r}" for f, v in GOOD])
def test_values_at_the_bounds_are_accepted(field, value):
    parsed = SamplingParams.from_mapping({field: value})
    assert getattr(parsed, field) == value
    assert getattr(SamplingParams(**{field: value}).validate(), field) == value


def test_the_new_fields_default_to_vllms_neutral_values():
    params = SamplingParams()
    assert params.top_k is None and params.min_p == 0.0
    assert (params.frequency_penalty, params.presence_penalty) == (0.0, 0.0)
    assert params.repetition_penalty == 1.0
    assert SamplingParams.from_mapping({"top_k": 5, "min_p": 0.2}).top_k == 5


def test_unknown_fields_and_non_mappings_are_refused():
    with pytest.raises(RequestError, match="unknown field `bogus`"):
        SamplingParams.from_mapping({"bogus": 1})
    with pytest.raises(RequestError, match="^sampling_params: Expected `object`"):
        SamplingParams.from_mapping([1, 2])


def test_validate_returns_the_checked_params():
    checked = SamplingParams(temperature=1, stop=("a",)).validate()
    assert isinstance(checked.temperature, float) and checked.stop == ["a"]
