"""A text-gate plugin on a real vLLM first stage (tiny-omni's thinker renders chats to token ids):
it reads ``request.text`` and rejects "forbidden" through ``omni serve`` (HTTP 403), ``omni
run`` (exit 2, the message on stderr) and ``generate(messages=...)``. One engine for the module."""

from __future__ import annotations

import asyncio
import types

import httpx
import pytest

from omni_core import PLUGIN_API_VERSION, RequestRejected, hookimpl
from omni_core.cli import main
from omni_core.testing.server import running_server

pytestmark = pytest.mark.timeout(
    300
)  # the module starts one real tiny-omni engine (slow under load)

SEEN: list[tuple[object, str]] = []  # (prompt, request.text) of every admission


def text_gate() -> types.ModuleType:
    module = types.ModuleType("text_gate_real")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(request, prompt):
        SEEN.append((prompt, request.text))
        if "forbidden" in request.text:
            raise RequestRejected(403, "the text gate refuses this request")

    module.omni_admit_request = omni_admit_request
    return module


@pytest.fixture(scope="module")
def served():
    with running_server("tiny-omni", plugins=[("text-gate", text_gate())]) as (base, engine, _):
        yield base, engine


def chat(base: str, text: str) -> httpx.Response:
    body = {
        "model": "tiny-omni",
        "messages": [{"role": "user", "content": text}],
        "modalities": ["text"],
        "max_tokens": 2,
    }
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)


def test_serve_rejects_a_forbidden_chat_with_the_gates_4xx(served):
    base, _ = served
    SEEN.clear()
    refused = chat(base, "say something forbidden")
    assert refused.status_code == 403, refused.text
    assert "text gate refuses" in refused.json()["error"]["message"]
    prompt, text = SEEN[-1]
    assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)  # rendered
    assert text == "say something forbidden"
    assert chat(base, "say something nice").status_code == 200


def test_generate_messages_is_gated_on_its_text(served):
    _, engine = served

    async def run(text: str) -> list:
        messages = [{"role": "user", "content": text}]
        return [o async for o in engine.generate(messages=messages, modalities=["text"])]

    [out] = asyncio.run(run("forbidden words"))
    assert out.finished and out.error is not None and out.error.status_code == 403
    assert asyncio.run(run("kind words"))[-1].error is None


class _Borrowed:
    """The module's engine lent to ``omni run`` (which shuts its engine down when done)."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def shutdown(self, timeout=None):
        pass


def test_omni_run_exits_2_naming_the_gates_refusal(served, monkeypatch, capsys):
    _, engine = served
    monkeypatch.setattr("omni_core.engine.factory.create_engine", lambda *a, **k: _Borrowed(engine))
    code = main(["run", "tiny-omni", "-p", "a forbidden prompt", "--modality", "text"])
    assert code == 2
    assert "text gate refuses" in capsys.readouterr().err
    assert SEEN[-1][1] == "a forbidden prompt"
