"""The server's gate: the API key on every route (a plugin's HTTP and WebSocket routes too),
/health minimal without it, /metrics and /openapi.json behind it unless public, body limit."""

from __future__ import annotations

import httpx
import pytest
from fastapi import WebSocket

from omni_core.config.settings import OmniSettings
from omni_core.errors import ConfigError
from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import ServerRoute
from omni_core.serve.server import api_key_of
from tests.serve.conftest import running_server

PIPE = """
name: guard-test
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 3}, final_output: true}
"""
KEY = "sekret-key"
CHAT = {"model": "guard-test", "messages": [{"role": "user", "content": "hi"}]}


class RoutesPlugin:
    """A third-party plugin mounting an HTTP route and a WebSocket route."""

    OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_server_routes(self):
        def mount(app, engine):
            @app.get("/plugin/ping")
            async def ping() -> dict[str, str]:
                return {"pong": "yes"}

            @app.websocket("/plugin/ws")
            async def ws(websocket: WebSocket) -> None:
                await websocket.accept()
                await websocket.send_text("hello")
                await websocket.close()

        return [ServerRoute("test-routes", mount)]


@pytest.fixture(scope="module")
def server():
    settings = OmniSettings(shutdown_timeout_s=5, max_body_bytes=4096)
    with running_server(
        PIPE, api_key=KEY, plugins=[("routes", RoutesPlugin())], settings=settings
    ) as running:
        yield running


AUTH = {"Authorization": f"Bearer {KEY}"}


def test_every_route_needs_the_key(server):
    base, _, _ = server
    for method, path in [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/images/generations"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/plugin/ping"),
        ("GET", "/no/such/route"),
    ]:
        for headers in ({}, {"Authorization": f"Bearer {KEY}x"}, {"Authorization": KEY}):
            r = httpx.request(method, base + path, headers=headers, json={})
            assert r.status_code == 401, (path, headers)
            assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(base + "/plugin/ping", headers=AUTH).json() == {"pong": "yes"}
    assert httpx.get(base + "/v1/models", headers=AUTH).status_code == 200
    assert "omni_requests" in httpx.get(base + "/metrics", headers=AUTH).text


def test_websocket_routes_need_the_key(server):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    base, _, _ = server
    url = base.replace("http", "ws") + "/plugin/ws"
    with pytest.raises(InvalidStatus) as refused:
        connect(url)
    assert refused.value.response.status_code == 403
    with connect(url, additional_headers=AUTH) as ws:
        assert ws.recv() == "hello"


def test_health_is_minimal_without_the_key(server):
    base, _, _ = server
    anonymous = httpx.get(base + "/health")
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
    detailed = httpx.get(base + "/health", headers=AUTH).json()
    assert detailed["alive"] is True and "thinker" in detailed["stages"]


def test_body_over_the_limit_is_413_and_the_server_goes_on(server):
    base, engine, _ = server
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    r = httpx.post(base + "/v1/chat/completions", headers=AUTH, json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: counted while it is read
        yield b'{"model": "guard-test", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    r = httpx.post(base + "/v1/chat/completions", headers=AUTH, content=chunked())
    assert r.status_code == 413
    r = httpx.post(base + "/v1/chat/completions", headers=AUTH, json=CHAT)
    assert r.status_code == 200 and engine.num_active_requests == 0


def test_public_metrics_opens_metrics_and_openapi_only():
    settings = OmniSettings(shutdown_timeout_s=5, public_metrics=True)
    with running_server(PIPE, api_key=KEY, settings=settings) as (base, _, _):
        assert httpx.get(base + "/metrics").status_code == 200
        assert httpx.get(base + "/openapi.json").status_code == 200
        assert httpx.get(base + "/v1/models").status_code == 401
        assert httpx.post(base + "/v1/chat/completions", json=CHAT).status_code == 401


def test_api_key_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("from-file\nignored\n")
    assert api_key_of(None, path) == "from-file"
    assert api_key_of("direct", None) == "direct"
    (tmp_path / "empty").write_text("\n")
    for key, file, needle in [
        ("a", path, "not both"),
        (None, tmp_path / "empty", "empty"),
        (None, tmp_path / "missing", "cannot read"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            api_key_of(key, file)
