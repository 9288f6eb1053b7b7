"""Where ``omni serve`` meets vLLM 0.32's server (issue 34 item 6, issue 36 item 8) and where it
differs on purpose (docs/serving.md, "What differs"): each case on a scripted pipeline, raw HTTP
and the official ``openai`` client."""

from __future__ import annotations

import httpx
import openai
import pytest

from omni_core.errors import RequestError
from omni_core.outputs import ErrorInfo
from omni_core.serve.errors import from_error_info
from omni_core.testing.server import running_server

PIPE = """
name: diff-test
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 4, delay_s: 0.002}, final_output: true}
"""
FAILING = PIPE.replace("delay_s: 0.002", "delay_s: 0.002, fail_after: 2")
HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "diff-test", "messages": HI}


@pytest.fixture(scope="module")
def base():
    with running_server(PIPE, max_inflight=8) as (url, _, _):
        yield url


def post(base: str, path: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=30, **kwargs)


def error_of(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


# --- issue 34 item 6 --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["x", 1, 2.5, ["a", 1], {"do_remote_prefill": True}])
@pytest.mark.parametrize("key", ["kv_transfer_params", "ec_transfer_params"])
def test_transfer_params_in_vllm_xargs_are_a_400_naming_them(base, key, value):
    error = error_of(post(base, "/v1/chat/completions", {**CHAT, "vllm_xargs": {key: value}}))
    assert error["param"] == "vllm_xargs"
    if not isinstance(value, dict):  # an object is no vllm_xargs value: pydantic's 400
        assert error["message"].startswith(f"'vllm_xargs.{key}': vLLM reads it for KV")


def test_more_prompts_than_can_ever_be_admitted_is_a_400_not_a_429(base):
    prompts = ["a"] * 9  # the server admits 8 at once
    response = post(base, "/v1/completions", {"model": "diff-test", "prompt": prompts})
    error = error_of(response)
    assert "retry-after" not in response.headers
    assert error["param"] == "prompt" and error["code"] == "too_many_prompts"
    assert error["message"].startswith("'prompt': 9 prompts;") and "at most 8" in error["message"]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=2)
    with pytest.raises(openai.BadRequestError, match="at most 8"):  # not retried
        client.completions.create(model="diff-test", prompt=prompts)
    got = post(base, "/v1/completions", {"model": "diff-test", "prompt": ["a"] * 8})
    assert got.status_code == 200 and len(got.json()["choices"]) == 8


@pytest.mark.parametrize(
    ("prompt", "where"),
    [
        (["a", "b", [1, 2]], "'prompt[2]': expected a string"),
        (["a", 3], "'prompt[1]': expected a string"),
        ([[1, 2], "b"], "'prompt[1]': expected a list of token ids"),
        ([[1, 2], [3, "x"]], "'prompt[1][1]': expected a token id"),
        ([1, 2, "x"], "'prompt[2]': expected a token id"),
        (["a", ""], "'prompt[1]' must not be empty"),
    ],
)
def test_a_mixed_prompt_list_names_the_element_that_differs(base, prompt, where):
    error = error_of(post(base, "/v1/completions", {"model": "diff-test", "prompt": prompt}))
    assert error["message"].startswith(where) and error["param"] == "prompt", error


# --- issue 34 item 5: a streamed error ends with [DONE] ----------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HI}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/completions", {"prompt": ["a", "b"]}),
    ],
)
def test_a_stream_that_fails_after_its_200_ends_with_done(path, body):
    with running_server(FAILING) as (url, engine, _):
        response = post(url, path, {"model": "diff-test", "stream": True, **body})
        assert response.status_code == 200
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert '"error"' in events[-2] and "fail_after" in events[-2]
        assert sum('"error"' in e for e in events) == 1
        assert engine.num_active_requests == 0


# --- issue 36 item 8: vLLM's behaviour ---------------------------------------------------------


def test_model_left_out_is_the_served_model(base):
    for path, body in [
        ("/v1/chat/completions", {"messages": HI}),
        ("/v1/chat/completions", {"model": None, "messages": HI}),
        ("/v1/completions", {"prompt": "hi"}),
    ]:
        got = post(base, path, body)
        assert got.status_code == 200, got.text
        assert got.json()["model"] == "diff-test"
    assert error_of(post(base, "/v1/completions", {"model": "x", "prompt": "hi"}), 404)


def test_a_message_without_content_is_a_400_but_an_assistants(base):
    for role in ("user", "system", "developer"):
        for message in ({"role": role, "content": None}, {"role": role}):
            body = {**CHAT, "messages": [message, *HI]}
            error = error_of(post(base, "/v1/chat/completions", body))
            assert error["message"].startswith("'messages[0].content': a ") and error["param"] == (
                "messages"
            )
    history = [*HI, {"role": "assistant", "content": None}, *HI]
    assert post(base, "/v1/chat/completions", {**CHAT, "messages": history}).status_code == 200


def test_more_than_four_stop_strings_are_a_400_as_in_vllm(base, monkeypatch):
    five = {**CHAT, "stop": ["a", "b", "c", "d", "e"]}
    error = error_of(post(base, "/v1/chat/completions", five))
    assert error["param"] == "stop" and error["message"].startswith("'stop': 5 stop strings")
    prompt = {"model": "diff-test", "prompt": "hi", "stop": five["stop"]}
    assert error_of(post(base, "/v1/completions", prompt))["param"] == "stop"
    assert post(base, "/v1/chat/completions", {**five, "stop": five["stop"][:4]}).status_code == 200
    monkeypatch.setenv("VLLM_MAX_STOP_STRINGS", "5")  # vLLM's variable (the server's process)
    assert post(base, "/v1/chat/completions", five).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_sent_as_json_is_refused_like_vllm(base, content_type):
    raw = httpx.Request("POST", "/", json=CHAT).content
    headers = {"content-type": content_type} if content_type else {}
    for path in ("/v1/chat/completions", "/v1/completions"):
        with httpx.Client(base_url=base) as h:
            request = h.build_request("POST", path, content=raw, headers=headers)
            if content_type is None:
                request.headers.pop("content-type", None)
            error = error_of(h.send(request))
        assert error["message"].startswith(
            "Unsupported Media Type: Only 'application/json' is allowed"
        )
        assert error["code"] == "unsupported_media_type"
    sent = post(
        base,
        "/v1/chat/completions",
        CHAT,
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert sent.status_code == 200


def test_version_route(base):
    import omni_core

    assert httpx.get(f"{base}/version").json() == {"version": omni_core.__version__}


def test_tokenize_is_absent_without_a_tokenizer(base):
    assert post(base, "/tokenize", {"prompt": "hi"}).status_code == 404


def test_x_request_id_is_echoed(base):
    got = post(base, "/v1/chat/completions", CHAT, headers={"X-Request-Id": "mine-1"})
    assert got.headers["x-request-id"] == "mine-1" and got.json()["id"] == "chatcmpl-mine-1"
    assert "x-request-id" not in post(base, "/v1/chat/completions", CHAT).headers


def test_custom_roles_are_a_400_naming_the_message(base):
    body = {**CHAT, "messages": [{"role": "critic", "content": "x"}]}
    error = error_of(post(base, "/v1/chat/completions", body))
    assert error["param"] == "messages" and error["message"].startswith("'messages[0].role'")


class VLLMValidationError(ValueError):
    """vLLM's validation error's shape (``parameter``), without importing vLLM."""

    def __init__(self, message: str, *, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def test_a_stage_errors_parameter_is_the_request_field():
    info = ErrorInfo.from_exception(VLLMValidationError("bad", parameter="min_tokens"), 400)
    assert from_error_info(info).param == "min_tokens"
    info = ErrorInfo.from_exception(VLLMValidationError("bad", parameter="extra_args"), 400)
    assert from_error_info(info).param == "vllm_xargs"  # vLLM's field, the request's name
    info = ErrorInfo.from_exception(RequestError("bad", param="prompt"), 400)
    assert from_error_info(info).param == "prompt"
    assert from_error_info(ErrorInfo.from_exception(ValueError("x"), 400)).param is None


def test_a_stage_errors_message_naming_a_field_first_gives_the_param():
    def param(message: str, status: int = 400) -> str | None:
        error = ErrorInfo(type="ValueError", message=message, status_code=status)
        return from_error_info(error).param

    # vLLM's own wording of checks it raises without a parameter
    assert param("min_tokens must be greater than or equal to 0, got -1.") == "min_tokens"
    assert param("bad_words cannot contain an empty string. Got bad_words=['']") == "bad_words"
    assert param("extra_args must be a mapping") == "vllm_xargs"
    assert param("n must be 1 when using greedy sampling, got 2.") == "n"
    assert param("nothing names a field here") is None
    assert param("min_tokens broke the stage", 500) is None  # a bug is no field's fault
