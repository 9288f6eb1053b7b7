"""vLLM's sampling extras, structured output, stop_reason and return_token_ids through ``omni
serve`` on the tiny thinker (one vLLM stage), with the official ``openai`` client: each extra
reaches vLLM's SamplingParams (its effect is visible in the answer), one server for the module.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.kinds.openai_helpers import MODEL, omni_client
from tests.kinds.test_openai_differential import MESSAGES

pytestmark = pytest.mark.timeout(300)  # the module starts one real vLLM stage (slow under load)


@pytest.fixture(scope="module")
def client():
    with omni_client(timeout=60) as made:
        yield made


def chat(client, **fields):
    body = {"max_tokens": 8, "temperature": 0, **fields.pop("top", {})}
    return client.chat.completions.create(
        model=MODEL, messages=MESSAGES[:2], extra_body=fields, **body
    )


def ids_of(choice) -> list[int]:
    return choice.model_extra["token_ids"]


@pytest.fixture(scope="module")
def greedy(client):
    """The greedy answer's token ids (return_token_ids)."""
    got = chat(client, return_token_ids=True)
    ids = ids_of(got.choices[0])
    assert len(ids) == got.usage.completion_tokens == 8
    assert got.model_extra["prompt_token_ids"] and len(got.model_extra["prompt_token_ids"]) == (
        got.usage.prompt_tokens
    )
    return ids


def test_stop_token_ids_and_stop_reason(client, greedy):
    got = chat(client, stop_token_ids=[greedy[2]], return_token_ids=True)
    choice = got.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] == greedy[2]
    assert ids_of(choice) == greedy[:3]  # the stop token is in token_ids (not in the text)


def test_min_tokens_overrides_a_stop_token(client, greedy):
    got = chat(client, stop_token_ids=[greedy[0]], min_tokens=4, return_token_ids=True)
    assert len(ids_of(got.choices[0])) >= 4


def test_ignore_eos_runs_to_max_tokens(client):
    got = chat(client, ignore_eos=True, top={"max_tokens": 24})
    assert got.usage.completion_tokens == 24 and got.choices[0].finish_reason == "length"


def test_stop_string_reason_and_include_stop_str(client):
    text = chat(client).choices[0].message.content
    stop = text[3:5]
    assert stop.strip(), text
    cut = chat(client, top={"stop": [stop]})
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].model_extra["stop_reason"] == stop
    kept = chat(client, include_stop_str_in_output=True, top={"stop": [stop]})
    assert kept.choices[0].message.content == text[: text.index(stop)] + stop


@pytest.mark.parametrize("field", ["allowed_token_ids", "logit_bias"])
def test_allowed_tokens_and_logit_bias_force_a_token(client, greedy, field):
    token = 300 if 300 not in greedy else 301
    value = [token] if field == "allowed_token_ids" else {str(token): 100}
    got = chat(client, return_token_ids=True, **{field: value})
    assert set(ids_of(got.choices[0])) == {token}


def test_bad_words_are_avoided(client):
    text = chat(client).choices[0].message.content
    word = text.split()[0]
    got = chat(client, bad_words=[word]).choices[0].message.content
    assert got != text


def test_prompt_logprobs_of_a_completion(client):
    got = client.completions.create(
        model=MODEL, prompt="the quick brown fox", max_tokens=2, extra_body={"prompt_logprobs": 1}
    )
    steps = got.choices[0].model_extra["prompt_logprobs"]
    assert len(steps) == got.usage.prompt_tokens and steps[0] is None
    assert all(1 <= len(s) <= 2 for s in steps[1:])
    entry = next(iter(steps[1].values()))
    assert set(entry) == {"logprob", "rank", "decoded_token"}


@pytest.mark.parametrize(
    "fields",
    [
        {"skip_special_tokens": False},
        {"spaces_between_special_tokens": False},
        {"watermarking": False},
        {"stream_interval": 2},
        {"vllm_xargs": {"tag": "x"}},
        {"repetition_detection": {"max_pattern_size": 4, "min_count": 3}},
    ],
    ids=lambda f: next(iter(f)),
)
def test_other_extras_are_accepted(client, fields):
    got = chat(client, **fields)
    assert got.usage.completion_tokens >= 1


def test_logprob_token_ids_give_those_tokens_logprobs(client):
    got = chat(client, logprob_token_ids=[5, 6], top={"logprobs": True})
    steps = got.choices[0].logprobs.content
    assert len(steps) == got.usage.completion_tokens and steps[0].logprob <= 0


def test_thinking_budget_is_refused_as_by_vllm_without_a_reasoning_parser(client):
    with pytest.raises(openai.BadRequestError, match="reasoning"):
        chat(client, thinking_token_budget=4)


def test_structured_choice(client):
    got = chat(client, structured_outputs={"choice": ["yes", "no"]})
    assert got.choices[0].message.content in ("yes", "no")


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_validates(client, stream):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    made = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES[:2],
        max_tokens=60,
        temperature=0,
        response_format=fmt,
        stream=stream,
    )
    if stream:
        text = "".join(ch.choices[0].delta.content or "" for ch in made if ch.choices)
    else:
        text = made.choices[0].message.content
    jsonschema.validate(json.loads(text), SCHEMA)


def test_json_object_output_parses(client):
    got = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES[:2],
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_object"},
    )
    text = got.choices[0].message.content
    assert text.lstrip().startswith("{")  # a random model may not close it within max_tokens
    if got.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"min_tokens": -1}, "min_tokens"),
        ({"prompt_logprobs": -2}, "prompt_logprobs"),
        ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs"),
        ({"guided_json": {"type": "object"}}, "guided_json"),
        ({"use_beam_search": True}, "use_beam_search"),
        ({"priority": 3}, "priority"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
    ],
)
def test_bad_extras_are_400(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, **fields)
    assert param in str(err.value)


def test_stream_carries_stop_reason_token_ids_and_continuous_usage(client, greedy):
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES[:2],
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
            extra_body={"stop_token_ids": [greedy[3]], "return_token_ids": True},
        )
    )
    with_choices = [ch for ch in chunks if ch.choices]
    assert with_choices[0].model_extra["prompt_token_ids"]
    ids = [t for ch in with_choices for t in (ch.choices[0].model_extra.get("token_ids") or [])]
    assert ids == greedy[:4]
    assert with_choices[-1].choices[0].model_extra["stop_reason"] == greedy[3]
    assert all(ch.usage is not None for ch in with_choices)
    assert with_choices[-1].usage.completion_tokens == 4
