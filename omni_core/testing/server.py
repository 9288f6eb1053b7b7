"""``running_server``: an engine behind ``omni serve``'s app on loopback, for tests of routes
(including the ones a plugin mounts). Needs the ``serve`` extra."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.plugin.hooks import PluginHost


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    pipeline: Any,
    *,
    api_key: str | None = None,
    max_inflight: int = 64,
    tracer_provider: Any = None,
    plugins: tuple[tuple[str, Any], ...] | list[tuple[str, Any]] = (),
    entry_points: bool = False,
    settings: OmniSettings | None = None,
) -> Iterator[tuple[str, Any, Any]]:
    """Yields ``(base_url, engine, metrics)``; stops the server and the engine afterwards.

    ``pipeline``: a name, a file, a config or YAML text. ``plugins``: extra (name, plugin)
    pairs; ``entry_points``: also load installed plugins. ``settings``: the engine's and the
    server's (limits, ``public_metrics``); default: the environment's, with a 5 s shutdown.
    """
    import uvicorn

    from omni_core.serve.app import create_app
    from omni_core.serve.server import build, uvicorn_config

    settings = settings or OmniSettings(shutdown_timeout_s=5)
    if isinstance(pipeline, str) and "\n" in pipeline:
        pipeline = PipelineConfig.from_yaml_text(pipeline, source="<test pipeline>")
    host = PluginHost.create(settings, load_entry_points=entry_points)
    for name, plugin in plugins:
        host.register(plugin, name)
    engine, metrics = build(pipeline, settings, host, tracer_provider=tracer_provider)
    app = create_app(engine, metrics, api_key=api_key, max_inflight=max_inflight)
    port = free_port()
    config = uvicorn_config(app, settings, host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.01)  # a test helper waiting for uvicorn's start flag
    try:
        yield f"http://127.0.0.1:{port}", engine, metrics
    finally:
        server.should_exit = True
        thread.join(10)
        engine.shutdown()
