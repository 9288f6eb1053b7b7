"""Builds the engine and runs uvicorn; SIGTERM drains in-flight requests, then aborts the rest."""

from __future__ import annotations

import contextlib
import logging
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
    would skip the engine's orderly shutdown)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # bound and accepting: whoever waits on this line may connect now
            logger.info("listening on http://%s:%d", self.config.host, self.config.port)


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

    engine, metrics = build(pipeline, settings, plugins)
    try:
        app = create_app(
            engine,
            metrics,
            api_key=api_key,
            max_inflight=max_inflight,
            public_metrics=public_metrics,
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=max(0, round(grace_s)),
        )
        server = _Server(config)
        for sig in (signal.SIGTERM, signal.SIGINT):  # stop accepting, drain up to grace_s
            signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
        logger.info("serving %s on http://%s:%d", engine.pipeline.config.name, host, port)
        server.run()
    finally:
        engine.shutdown()  # whatever is still running gets aborted
