"""``omni serve``'s edges (issue 24): nothing heavy on the event loop, a prompt budget, bounded
connections (half-sent requests, clients that stop reading), clean disconnects and drains."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.chat import PlainRenderer
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import StageKind
from omni_core.serve.app import create_app
from omni_core.serve.server import build, serving_server
from omni_core.testing.fixtures import KEPT_ENV
from omni_core.testing.scripted import ScriptedStageClient
from omni_core.testing.scripted_core import ScriptedArgs
from tests.serve.conftest import free_port

PIPE = """
name: edge
stages:
  - {id: 0, name: thinker, kind: slow-render, engine_args: {num_tokens: 3, delay_s: 0.002}, final_output: true}
"""
SLOW = PIPE.replace("num_tokens: 3, delay_s: 0.002", "num_tokens: 40, delay_s: 0.25")
CHAT = {"model": "edge", "messages": [{"role": "user", "content": "hi"}]}
RENDER_S = 1.5  # a chat template + tokenizer taking this long (it releases the GIL, as HF's does)


class SlowRenderer(PlainRenderer):
    """Renders like :class:`PlainRenderer`, slowly for long prompts; says when it starts."""

    started = threading.Event()

    def render_chat(self, messages: Any, options: Any) -> Any:
        if sum(len(m.text()) for m in messages) > 1000:
            SlowRenderer.started.set()
            time.sleep(RENDER_S)
        return super().render_chat(messages, options)


def _plugin() -> types.ModuleType:
    module = types.ModuleType("slow_render")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def make(stage: Any, replica: Any, context: Any) -> Any:
        return ScriptedStageClient(
            "slow", stage.name, ScriptedArgs.model_validate(stage.engine_args)
        )

    @hookimpl
    def omni_register_stage_kinds() -> list[StageKind]:
        renderer = lambda config, args, settings: SlowRenderer(config.name)  # noqa: E731
        return [StageKind("slow-render", make, ScriptedArgs, renderer=renderer)]

    module.omni_register_stage_kinds = omni_register_stage_kinds  # type: ignore[attr-defined]
    return module


@contextmanager
def served(
    pipeline: str = PIPE, grace_s: float = 10.0, **overrides: Any
) -> Iterator[tuple[str, Any, Any, Any]]:
    """``omni serve``'s own server (its protocol, its drain) on loopback, in a thread: yields
    ``(base_url, engine, app, server)``."""
    settings = OmniSettings(shutdown_timeout_s=5, **overrides)
    host = PluginHost.create(settings, load_entry_points=False)
    host.register(_plugin(), "slow-render")
    config = PipelineConfig.from_yaml_text(pipeline, source="<test pipeline>")
    engine, metrics = build(config, settings, host)
    app = create_app(engine, metrics)
    port = free_port()
    server = serving_server(app, settings, grace_s, host="127.0.0.1", port=port, log_level="info")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", engine, app, server
    finally:
        server.should_exit = True
        thread.join(15)
        engine.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Any, Any, Any]]:
    with served(max_prompt_chars=200_000, read_timeout_s=0.5) as running:
        yield running


def test_health_answers_while_a_maximal_chat_is_rendered(server):
    base, engine, _, _ = server
    SlowRenderer.started.clear()
    big = {**CHAT, "messages": [{"role": "user", "content": "word " * 40_000}]}  # 200k chars
    result: dict[str, Any] = {}

    def post() -> None:
        result["r"] = httpx.post(base + "/v1/chat/completions", json=big, timeout=30)

    with httpx.Client(base_url=base) as h:
        h.get("/v1/models")  # the connection is open: what follows times the route alone
        worker = threading.Thread(target=post)
        worker.start()
        try:
            assert SlowRenderer.started.wait(10)  # the request is being prepared now
            begin = time.monotonic()
            health = h.get("/health")
            took = time.monotonic() - begin
            assert health.status_code == 200
            assert took < 0.1, f"/health took {took:.3f} s while a chat was rendered"
        finally:
            worker.join(30)
    assert result["r"].status_code == 200


def test_prompt_chars_past_the_budget_are_a_400_naming_the_field(server):
    base, engine, _, _ = server
    over = {**CHAT, "messages": [{"role": "user", "content": "x" * 200_001}]}
    r = httpx.post(base + "/v1/chat/completions", json=over)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "messages" and error["code"] == "prompt_too_long"
    assert "200001 characters" in error["message"] and "200000" in error["message"]
    assert "OMNI_MAX_PROMPT_CHARS" in error["message"]
    parts = [{"type": "text", "text": "y" * 100_001}, {"type": "text", "text": "z" * 100_000}]
    r = httpx.post(base + "/v1/chat/completions", json={**CHAT, "messages": [
        {"role": "user", "content": parts}]})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(base + "/v1/completions", json={"model": "edge", "prompt": "p" * 200_001})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = httpx.post(base + "/v1/completions", json={"model": "edge", "prompt": "p" * 200_000})
    assert r.status_code == 200
    assert engine.num_active_requests == 0


def test_a_bad_content_part_names_its_path(server):
    base, _, _, _ = server
    content = [{"type": "text", "text": "a"}, {"type": "video", "video": "x"}]
    r = httpx.post(base + "/v1/chat/completions", json={**CHAT, "messages": [
        {"role": "user", "content": content}]})  # fmt: skip
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert message.startswith("'messages[0].content[1].type': "), message
    content = [{"type": "text", "text": 5}]
    r = httpx.post(base + "/v1/chat/completions", json={**CHAT, "messages": [
        {"role": "user", "content": content}]})  # fmt: skip
    assert r.json()["error"]["message"].startswith("'messages[0].content[0].text': ")


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the server sent before closing the connection (fails if it stays open)."""
    sock.settimeout(seconds)
    got = b""
    while True:
        chunk = sock.recv(65536)  # socket.timeout (a failure) if the server keeps it open
        if not chunk:
            return got
        got += chunk


def test_half_sent_requests_are_closed(server):
    base, engine, _, _ = server
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as silent:  # connects, says nothing
        assert _closed_within(silent, 5).startswith(b"HTTP/1.1 408")
    with socket.create_connection(("127.0.0.1", port)) as half:  # half its headers
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        assert _closed_within(half, 5).startswith(b"HTTP/1.1 408")
    body = json.dumps(CHAT).encode()
    with socket.create_connection(("127.0.0.1", port)) as slow_body:  # half its body
        slow_body.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
        )
        reply = _closed_within(slow_body, 5)
        assert reply.startswith(b"HTTP/1.1 408") and b"OMNI_READ_TIMEOUT_S" in reply
    # a whole request on a connection kept alive is untouched by the deadline
    with httpx.Client(base_url=base) as h:
        assert h.post("/v1/chat/completions", json=CHAT).status_code == 200
        time.sleep(0.7)  # idle past the read timeout, within uvicorn's keep-alive
        assert h.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.num_active_requests == 0


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _logs() -> Iterator[_Records]:
    handler = _Records()
    loggers = [logging.getLogger(n) for n in ("", "uvicorn")]  # omni_core propagates to ""
    ours = logging.getLogger("omni_core")
    level = ours.level
    for lg in loggers:
        lg.addHandler(handler)
    ours.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        ours.setLevel(level)


def _wait_idle(engine: Any, app: Any) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        engine.num_active_requests or app.state.admission.inflight
    ):
        time.sleep(0.02)
    assert engine.num_active_requests == 0 and app.state.admission.inflight == 0


def test_a_client_going_away_is_one_info_line():
    with served(SLOW) as (base, engine, app, _), _logs() as logs:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=0.3)
        with httpx.stream(
            "POST", base + "/v1/chat/completions", json={**CHAT, "stream": True}
        ) as r:
            next(r.iter_lines())  # one event, then the client hangs up
        _wait_idle(engine, app)
        time.sleep(0.2)
    errors = [r for r in logs.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]
    gone = [r for r in logs.records if "went away" in r.getMessage()]
    assert len(gone) == 2 and all(r.levelno == logging.INFO for r in gone)


def test_grace_expiry_ends_streams_with_an_error_event_and_done():
    with served(SLOW, grace_s=0.5) as (base, engine, app, server):
        events: list[str] = []
        whole: dict[str, Any] = {}

        def collect() -> None:
            whole["r"] = httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=30)

        other = threading.Thread(target=collect)
        other.start()
        with httpx.stream(
            "POST", base + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) == 2:
                        server.should_exit = True  # SIGTERM: drain for 0.5 s, then cut
        other.join(30)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "server_shutdown" and "grace period" in error["message"]
        assert whole["r"].status_code == 503
        assert whole["r"].json()["error"]["code"] == "server_shutdown"


def test_a_client_that_stops_reading_loses_its_stream_and_slot():
    """The ASGI view of a client that stopped reading: uvicorn's ``send`` blocks once the
    socket's buffers are full (it waits for the transport to drain, forever)."""
    with served(SLOW, write_timeout_s=0.3) as (_, engine, app, _), _logs() as logs:
        aborted = threading.Event()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 5555),
            "server": ("127.0.0.1", 80),
            "state": {},
            "extensions": {"omni.connection": {"abort": aborted.set}},
        }
        body = json.dumps({**CHAT, "stream": True}).encode()
        sent: list[dict[str, Any]] = []

        async def go() -> None:
            messages = [{"type": "http.request", "body": body, "more_body": False}]
            stalled = asyncio.Event()

            async def receive() -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await asyncio.Event().wait()  # the client neither disconnects nor reads
                raise AssertionError

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)
                if message["type"] == "http.response.body":
                    stalled.set()
                    await asyncio.Event().wait()  # the socket's buffers are full

            await asyncio.wait_for(app(scope, receive, send), 10)
            assert stalled.is_set()

        asyncio.run(go())
        assert aborted.is_set()  # the connection was dropped
        assert sent[0]["status"] == 200
        _wait_idle(engine, app)  # the request was aborted, its slot freed
    stalled = [r for r in logs.records if "OMNI_WRITE_TIMEOUT_S" in r.getMessage()]
    assert len(stalled) == 1 and stalled[0].levelno == logging.WARNING


SCRIPTED = """
name: cli-edge
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


@pytest.fixture
def serve_cli(tmp_path, monkeypatch):
    """``omni serve FILE ARGS...`` in-process, engine building forbidden: the checks under test
    must fail before it."""
    import os

    from typer.testing import CliRunner

    from omni_core.cli.app import build_app
    from omni_core.serve import server as server_module

    for name in [n for n in os.environ if n.startswith("OMNI_") and n not in KEPT_ENV]:
        monkeypatch.delenv(name)

    def no_engine(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the engine was built")

    monkeypatch.setattr(server_module, "build", no_engine)
    (tmp_path / "p.yaml").write_text(SCRIPTED)

    def run(*args: str) -> Any:
        return CliRunner().invoke(build_app(), ["serve", str(tmp_path / "p.yaml"), *args])

    return run


def test_an_empty_api_key_is_refused(serve_cli, monkeypatch, tmp_path):
    result = serve_cli("--api-key", "")
    assert result.exit_code == 2, result.output
    assert "--api-key: the key is empty" in result.output
    result = serve_cli("--api-key", "  ")
    assert result.exit_code == 2 and "--api-key" in result.output
    (tmp_path / "key").write_text("\n")
    result = serve_cli("--api-key-file", str(tmp_path / "key"))
    assert result.exit_code == 2 and "the API key file is empty" in result.output
    monkeypatch.setenv("OMNI_API_KEY", "")
    result = serve_cli()
    assert result.exit_code == 2 and "OMNI_API_KEY: the key is empty" in result.output


def test_a_port_in_use_is_exit_2_before_the_engine_is_built(serve_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve_cli("--port", str(port))
    assert result.exit_code == 2, result.output
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}: the port is in use" in result.output


@pytest.mark.slow
def test_a_real_socket_that_stops_reading_is_dropped():
    """End to end: a client with a tiny receive window that never reads its stream."""
    many = PIPE.replace("num_tokens: 3, delay_s: 0.002", "num_tokens: 60000")
    with served(many, write_timeout_s=1.0) as (base, engine, app, _):
        port = int(base.rsplit(":", 1)[1])
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            client.connect(("127.0.0.1", port))
            body = json.dumps({**CHAT, "stream": True}).encode()
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and app.state.admission.inflight:
                time.sleep(0.1)  # the buffers fill, then the write timeout drops it
            assert app.state.admission.inflight == 0
            _wait_idle(engine, app)
            try:
                received = _closed_within(client, 5)  # what was buffered, then the end
            except ConnectionResetError:
                received = b"reset"
            assert received  # it was streaming before it was dropped
