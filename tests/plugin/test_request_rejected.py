"""An admission hook rejects a request with its own status through ``RequestRejected``."""

from __future__ import annotations

import types

import httpx
import pytest

from omni_core import PLUGIN_API_VERSION, RequestRejected, hookimpl
from omni_core.errors import OmniError, PluginError
from tests.helpers import collect

PIPE = """
name: gated
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 3}, final_output: true}
  - {id: 1, name: voice, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
"""

# what the gate does with a prompt that starts with one of these words
VERDICTS = {
    "forbidden": RequestRejected(403, "this key may not use the voice"),
    "unprocessable": RequestRejected(422, "the prompt names no speaker"),
    "quota": RequestRejected(429, "over the daily quota"),
    "broken": RuntimeError("gate database unreachable"),
}


def gate_plugin() -> types.ModuleType:
    module = types.ModuleType("gate_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(request_id, prompt):
        verdict = VERDICTS.get(str(prompt).split()[0])
        if verdict is not None:
            raise verdict
        return None

    module.omni_admit_request = omni_admit_request
    return module


def test_request_rejected_is_a_public_omni_error_with_a_4xx_status():
    exc = RequestRejected(429, "slow down")
    assert isinstance(exc, OmniError) and str(exc) == "slow down"
    assert (exc.status, exc.status_code, exc.retryable) == (429, 429, True)
    assert not RequestRejected(403, "no").retryable
    for bad in (200, 500, 503, "403", True):
        with pytest.raises(PluginError, match="4xx"):
            RequestRejected(bad, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("word", "status"), [("forbidden", 403), ("unprocessable", 422), ("quota", 429)]
)
async def test_python_caller_gets_one_terminal_with_the_plugins_status(
    make_engine, fake_entry_points, word, status
):
    fake_entry_points.add("gate", gate_plugin())
    engine = make_engine(PIPE)
    [out] = await collect(engine, f"{word} please")
    assert out.finished and out.finish_reason == "error"
    assert out.error.type == "RequestRejected" and out.error.status_code == status
    assert out.error.message == str(VERDICTS[word]) and out.error.retryable == (status == 429)
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    ok = await collect(engine, "hello")  # other requests pass the gate
    assert ok[-1].finish_reason == "stop" and ok[-1].error is None


async def test_any_other_exception_from_the_hook_stays_a_400_naming_the_plugin(
    make_engine, fake_entry_points
):
    fake_entry_points.add("gate", gate_plugin())
    engine = make_engine(PIPE)
    [out] = await collect(engine, "broken please")
    assert out.finished and out.error.status_code == 400 and out.error.type == "PluginError"
    assert "plugin 'gate' rejected the request: RuntimeError" in out.error.message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_http_caller_gets_the_plugins_status_in_openais_error_shape(stream):
    pytest.importorskip("fastapi")
    from omni_core.testing.server import running_server

    expected = {
        "forbidden": (403, "permission_error"),
        "unprocessable": (422, "invalid_request_error"),
        "quota": (429, "rate_limit_exceeded"),
        "broken": (400, "invalid_request_error"),
    }
    with running_server(PIPE, plugins=[("gate", gate_plugin())]) as (base, _, _):
        for word, (status, kind) in expected.items():
            r = httpx.post(
                f"{base}/v1/chat/completions",
                json={
                    "model": "gated",
                    "messages": [{"role": "user", "content": f"{word} please"}],
                    "stream": stream,
                },
            )
            assert r.status_code == status, (word, r.text)
            error = r.json()["error"]
            assert error["type"] == kind and set(error) == {"message", "type", "param", "code"}
            if word != "broken":
                assert error["message"] == str(VERDICTS[word])
                assert error["code"] == "RequestRejected"
        ok = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "gated", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert ok.status_code == 200
