"""An engine kind without a request API (no ``generate``): the OpenAI request routes answer a
clear 400 naming where the server offers the model instead of failing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from omni_core import hookimpl
from omni_core.engine.base import OmniEngineBase
from omni_core.orchestrator.turn import Orchestrator
from omni_core.plugin.types import EngineKind, ServerRoute
from omni_core.serve.app import create_app
from omni_core.serve.metrics import OmniMetrics

PIPE = """
name: stream-only
engine: stream-only
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


class StreamOnlyEngine(OmniEngineBase):
    """Served only through its plugin's route: no ``generate``."""

    def create_orchestrator(self, **kwargs: Any) -> Orchestrator:
        return Orchestrator(**kwargs)


def _mount(app: Any, engine: Any) -> None:
    @app.get("/v1/stream-only/hello")
    async def hello() -> dict[str, str]:
        return {"hello": engine.pipeline.config.name}


class StreamOnlyPlugin:
    OMNI_PLUGIN_API_VERSION = 2

    @hookimpl
    def omni_register_engine_kinds(self):
        return [EngineKind("stream-only", StreamOnlyEngine)]

    @hookimpl
    def omni_register_server_routes(self):
        return [ServerRoute("stream-only-hello", _mount)]


@pytest.fixture
def app(make_engine, fake_entry_points):
    fake_entry_points.add("stream-only", StreamOnlyPlugin())
    engine = make_engine(PIPE)
    assert not hasattr(engine, "generate")
    return create_app(engine, OmniMetrics())


async def test_chat_and_images_on_an_engine_without_generate_give_400(app):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "stream-only", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert chat.status_code == 400
        error = chat.json()["error"]
        assert error["code"] == "unsupported_endpoint" and error["param"] == "model"
        assert "/v1/stream-only/hello" in error["message"]
        assert "'stream-only'" in error["message"]
        images = await client.post(
            "/v1/images/generations", json={"model": "stream-only", "prompt": "x"}
        )
        assert images.status_code == 400
        assert images.json()["error"]["code"] == "unsupported_endpoint"
        # a wrong model name is still a 404, and the plugin's route still answers
        wrong = await client.post(
            "/v1/chat/completions",
            json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert wrong.status_code == 404
        hello = await client.get("/v1/stream-only/hello")
        assert hello.json() == {"hello": "stream-only"}
        models = await client.get("/v1/models")
        assert [m["id"] for m in models.json()["data"]] == ["stream-only"]
