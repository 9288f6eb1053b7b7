"""Builds the engine and runs uvicorn; SIGTERM drains in-flight requests, then aborts the rest.

The port is bound before the engine is built (a port in use is exit 2 at once, not after
minutes of loading models); streams still running when the grace period expires end with an
error event and ``data: [DONE]`` (:class:`~omni_core.serve.connections.Drain`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from omni_core.config.settings import OmniSettings
from omni_core.engine.base import OmniEngineBase
from omni_core.engine.factory import create_engine
from omni_core.errors import ConfigError
from omni_core.plugin.hooks import PluginHost
from omni_core.serve.metrics import OmniMetrics

logger = logging.getLogger(__name__)


def build(
    pipeline: Any, settings: OmniSettings, plugins: PluginHost, tracer_provider: Any = None
) -> tuple[OmniEngineBase, OmniMetrics]:
    """An engine with the metrics plugin (and tracing when requested) registered."""
    from omni_core.serve import tracing

    metrics = OmniMetrics()
    plugins.register(metrics, "omni-metrics")
    if tracer_provider is None and tracing.tracing_requested():
        tracer_provider = tracing.default_provider()
    if tracer_provider is not None:
        plugins.register(tracing.OmniTracing(tracer_provider), "omni-tracing")
    engine = create_engine(pipeline, settings=settings, plugins=plugins)
    return engine, metrics


class _Server(uvicorn.Server):
    """uvicorn's server without its signal capture (which re-raises SIGTERM after draining and
    would skip the engine's orderly shutdown); its shutdown begins the app's drain."""

    def __init__(self, config: uvicorn.Config, drain: Any = None, grace_s: float = 0.0) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace_s = grace_s

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # bound and accepting: whoever waits on this line may connect now
            logger.info("listening on http://%s:%d", self.config.host, self.config.port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.drain is not None:
            self.drain.begin(self.grace_s)  # streams still running then end with an error
        await super().shutdown(sockets)


def uvicorn_config(app: Any, settings: OmniSettings, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for the app: its header deadline (``OMNI_READ_TIMEOUT_S``) included."""
    from omni_core.serve.connections import http_protocol

    return uvicorn.Config(app, http=http_protocol(settings.read_timeout_s), **kwargs)


def serving_server(
    app: Any, settings: OmniSettings, grace_s: float, **kwargs: Any
) -> uvicorn.Server:
    """The server ``omni serve`` runs: SIGTERM drains for ``grace_s``, then streams still
    running end with an error event (uvicorn cancels what is left a second later)."""
    config = uvicorn_config(
        app, settings, timeout_graceful_shutdown=math.ceil(grace_s) + 1, **kwargs
    )
    return _Server(config, getattr(app.state, "drain", None), grace_s)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything slow starts; a port in use is a ConfigError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise ConfigError([f"--port {port}: cannot listen on {host}:{port}: {why}"]) from None
    sock.set_inheritable(True)
    return sock


def resolve_api_key(key: str | None, key_file: Path | None, settings: OmniSettings) -> str | None:
    """The API key from the flags, else the settings: an empty one is refused (it would serve
    without authentication), naming where it came from."""
    if key is not None and not key.strip():
        raise ConfigError(
            ["--api-key: the key is empty (leave the option out to serve without one)"]
        )
    if key is None and key_file is None and settings.api_key is not None:
        if not settings.api_key.strip():
            raise ConfigError(["OMNI_API_KEY: the key is empty (unset it to serve without one)"])
    return api_key_of(
        key or (None if key_file else settings.api_key),
        key_file or (None if key else settings.api_key_file),
    )


def api_key_of(key: str | None, key_file: Path | None) -> str | None:
    """The API key: given directly, or the first line of a file (which keeps it out of ``ps``)."""
    if key and key_file:
        raise ConfigError(["give either an API key or an API key file, not both"])
    if key_file is None:
        return key or None
    try:
        lines = Path(key_file).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{key_file}: cannot read the API key file: {exc}"]) from None
    if not lines or not lines[0].strip():
        raise ConfigError([f"{key_file}: the API key file is empty"])
    return lines[0].strip()


def run_server(
    pipeline: Any,
    *,
    settings: OmniSettings,
    plugins: PluginHost,
    host: str,
    port: int,
    api_key: str | None,
    max_inflight: int,
    grace_s: float,
    public_metrics: bool = False,
) -> None:
    from omni_core.serve.app import create_app

    sock = bind(host, port)  # before the engine: a port in use fails now
    try:
        engine, metrics = build(pipeline, settings, plugins)
    except BaseException:
        sock.close()
        raise
    try:
        app = create_app(
            engine,
            metrics,
            api_key=api_key,
            max_inflight=max_inflight,
            public_metrics=public_metrics,
        )
        server = serving_server(app, settings, grace_s, host=host, port=port, log_level="warning")
        for sig in (signal.SIGTERM, signal.SIGINT):  # stop accepting, drain up to grace_s
            signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
        logger.info("serving %s on http://%s:%d", engine.pipeline.config.name, host, port)
        server.run(sockets=[sock])
    finally:
        sock.close()
        engine.shutdown()  # whatever is still running gets aborted
