from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import uvicorn

from omni_core import OmniSettings, PipelineConfig
from omni_core.plugin.hooks import PluginHost
from omni_core.serve.app import create_app
from omni_core.serve.server import build


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(pipeline, *, api_key=None, max_inflight=64, tracer_provider=None, plugins=()):
    """An engine + server on loopback (a thread); yields (base_url, engine, metrics)."""
    settings = OmniSettings(shutdown_timeout_s=5)
    if isinstance(pipeline, str) and "\n" in pipeline:
        pipeline = PipelineConfig.from_yaml_text(pipeline)
    host = PluginHost.create(settings, load_entry_points=False)
    for name, plugin in plugins:
        host.register(plugin, name)
    engine, metrics = build(pipeline, settings, host, tracer_provider=tracer_provider)
    app = create_app(engine, metrics, api_key=api_key, max_inflight=max_inflight)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", engine, metrics
    finally:
        server.should_exit = True
        thread.join(10)
        engine.shutdown()
