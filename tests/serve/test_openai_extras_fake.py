"""vLLM-server behaviours of ``omni serve`` that need no real model (a scripted first stage):
vLLM's sampling extras refused for a non-vllm first stage, X-Request-Id, /v1/models' fields,
continuous usage stats."""

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


@pytest.fixture(scope="module")
def base():
    with running_server(PIPE) as (url, _, _):
        yield url


def post(base: str, path: str, **body) -> httpx.Response:
    return httpx.post(f"{base}/v1/{path}", json={"model": "fake-chat", **body}, timeout=30)


@pytest.mark.parametrize(
    "field",
    [
        {"ignore_eos": True},
        {"min_tokens": 2},
        {"stop_token_ids": [3]},
        {"logit_bias": {"5": 1.0}},
        {"structured_outputs": {"choice": ["a", "b"]}},
        {"response_format": {"type": "json_object"}},
    ],
    ids=lambda f: next(iter(f)),
)
@pytest.mark.parametrize("path", ["chat/completions", "completions"])
def test_vllm_extras_name_field_and_kind_for_another_first_stage(base, field, path):
    body = {"messages": HI} if path.startswith("chat") else {"prompt": "hi"}
    got = post(base, path, **body, **field)
    name = next(iter(field))
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["param"] == name
    assert f"'{name}'" in error["message"] and "'scripted'" in error["message"]


def test_text_response_format_needs_no_vllm_stage(base):
    got = post(base, "chat/completions", messages=HI, response_format={"type": "text"})
    assert got.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_x_request_id_names_the_response(base, stream):
    got = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "fake-chat", "messages": HI, "stream": stream},
        headers={"X-Request-Id": "abc-123"},
        timeout=30,
    )
    assert got.status_code == 200 and got.headers["x-request-id"] == "abc-123"
    assert '"id":"chatcmpl-abc-123"' in got.text.replace(" ", "")


def test_body_request_id_names_a_completion(base):
    got = post(base, "completions", prompt="hi", request_id="r7")
    assert got.json()["id"] == "cmpl-r7"


def test_models_list_carries_vllms_fields(base):
    card = httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]
    assert card["created"] > 1_600_000_000
    assert {"root", "parent", "max_model_len"} <= set(card)
    assert card["permission"][0]["object"] == "model_permission"


def test_continuous_usage_stats_in_every_chunk(base):
    import json

    got = post(
        base,
        "completions",
        prompt="hi",
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    chunks = [json.loads(line[6:]) for line in got.text.splitlines() if line.startswith("data: {")]
    with_choices = [c for c in chunks if c["choices"]]
    done = [c["usage"]["completion_tokens"] for c in with_choices]
    assert done == sorted(done) and done[-1] == 5
    assert all(
        c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + n
        for c, n in zip(with_choices, done, strict=True)
    )
