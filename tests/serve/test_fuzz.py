"""Fuzzing the HTTP API: arbitrary JSON bodies (and bodies shaped like the real ones, with wrong
values) never get a 5xx, never take the engine down, and each ends as one 200 or one 4xx in
OpenAI's error shape; streamed ones are rejected before the 200."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_core.testing.tiers import examples
from tests.serve.conftest import running_server

PIPE = """
name: fuzz
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""
FIELDS = [
    "model", "messages", "prompt", "stream", "stream_options", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "stop", "seed", "n", "logprobs", "top_logprobs",
    "modalities", "audio", "echo", "response_format", "chat_template_kwargs", "tools", "user",
    "add_generation_prompt", "continue_final_message", "size", "bogus",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio", "video"]) | json_values},
    optional={"text": json_values, "image_url": json_values},
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | json_values},
    optional={"content": st.text(max_size=10) | st.lists(part, max_size=2) | json_values},
)
valued = {
    "model": st.just("fuzz") | json_values,
    "messages": st.lists(message, max_size=3) | json_values,
    "n": st.integers(-2, 40) | json_values,
    "stream": st.booleans(),
}
shaped = st.fixed_dictionaries(
    {},
    optional={f: valued.get(f, json_values) for f in FIELDS},
)
plausible = (
    st.integers(-3, 40)
    | st.floats(-3, 3)
    | st.booleans()
    | st.text(max_size=6)
    | st.lists(st.text(max_size=4), max_size=3)
)
VALID = {
    "/v1/chat/completions": {"model": "fuzz", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "fuzz", "prompt": "hi"},
    "/v1/images/generations": {"model": "fuzz", "prompt": "hi"},
}
changes = (
    st.just({})
    | st.fixed_dictionaries({"stream": st.booleans()})
    | st.dictionaries(st.sampled_from(FIELDS[3:]), plausible, max_size=1)
    | st.dictionaries(st.sampled_from(FIELDS[3:]), plausible | json_values, max_size=2)
)
near_valid = st.sampled_from(sorted(VALID)).flatmap(
    lambda path: st.tuples(st.just(path), st.builds(lambda c: {**VALID[path], **c}, changes))
)
anything = st.tuples(
    st.sampled_from(sorted(VALID)),
    shaped | st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6) | json_values,
)
requests = near_valid | anything


@pytest.fixture(scope="module")
def server():
    with running_server(PIPE) as running:
        yield running


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert not any('"error"' in e[:10] for e in events)
        return
    body = response.json()
    if "choices" in body:
        assert all(c["finish_reason"] for c in body["choices"])


@settings(
    max_examples=examples(250),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests)
def test_arbitrary_bodies_never_5xx(server, request):
    base, engine, _ = server
    path, body = request
    headers = {"content-type": "application/json"}  # else a 400 before the body is parsed
    check(httpx.post(base + path, content=json.dumps(body), headers=headers, timeout=30))


JSON = {"content-type": "application/json"}


def test_engine_survives_the_fuzz_and_still_answers(server):
    base, engine, _ = server
    for raw in (b"", b"[", b"\xff\xfe", b"null", b"1e999", b"NaN", b"[" * 5000 + b"]" * 5000):
        check(httpx.post(base + "/v1/chat/completions", content=raw, headers=JSON))
    deep = {"model": "fuzz", "messages": [{"role": "user", "content": "x"}], "x": []}
    node = deep["x"]
    for _ in range(100):
        node.append([])
        node = node[0]
    r = httpx.post(base + "/v1/chat/completions", json=deep)
    assert r.status_code == 400 and "nests deeper" in r.json()["error"]["message"]
    assert httpx.get(base + "/health").status_code == 200
    ok = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "fuzz", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "stop"
    assert engine.is_alive() and engine.num_active_requests == 0
