"""The serving tier on Ray Serve: one engine (the pipeline's engine kind: an
:class:`AsyncOmniEngine` for ``turn``) per deployment replica, behind the same FastAPI app as
``omni serve`` (:func:`omni_core.serve.app.create_app`) through Serve's ASGI ingress; Serve's
proxy spreads requests over the replicas.

From Python::

    from ray import serve
    from omni_core.serve.ray_serve import omni_app

    serve.run(omni_app("tiny-omni", replicas=2), name="omni", route_prefix="/")

From the command line: ``omni serve PIPELINE --ray-serve --replicas N``
(:func:`run_ray_serve`: joins ``RAY_ADDRESS`` / the pipeline's ``ray_address``, else starts a
local Ray on loopback, like the ``ray`` runtime).

Each replica builds its engine from the pipeline config it is given (``runtime: local`` stages run
inside the replica's process tree; ``runtime: ray`` stages become actors of the same cluster).
Every response carries ``x-omni-replica`` (the Serve replica that answered). Serve asks each
replica ``check_health``: a replica whose engine died is replaced.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

from omni_core.config.settings import OmniSettings
from omni_core.errors import EngineDeadError, StartupError

logger = logging.getLogger(__name__)

REPLICA_HEADER = "x-omni-replica"
DEPLOYMENT = "OmniServe"


class OmniServeReplica:
    """One Serve replica: an engine and the ``omni serve`` app around it, built when Serve asks
    for the app (``__serve_build_asgi_app__``, awaited at replica start-up)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._omni_spec = spec
        self._omni_engine: Any = None
        self._omni_replica = _replica_id()

    async def __serve_build_asgi_app__(self) -> Any:
        from omni_core.plugin.hooks import PluginHost
        from omni_core.serve.app import create_app
        from omni_core.serve.server import build

        spec = self._omni_spec
        settings = OmniSettings(**spec["settings"])
        host = PluginHost.create(settings, load_entry_points=spec["load_plugins"])
        # a thread: the replica's event loop stays responsive while the stages load
        self._omni_engine, metrics = await asyncio.to_thread(
            build, spec["pipeline"], settings, host
        )
        app = create_app(
            self._omni_engine,
            metrics,
            api_key=spec["api_key"],
            max_inflight=spec["max_inflight"],
            public_metrics=spec["public_metrics"],
        )
        replica = self._omni_replica

        @app.middleware("http")
        async def tag(request: Any, call_next: Any) -> Any:
            response = await call_next(request)
            response.headers[REPLICA_HEADER] = replica
            return response

        logger.info(
            "ray serve: replica %s serves %s", replica, self._omni_engine.pipeline.config.name
        )
        return app

    def check_health(self) -> None:
        """Serve's health probe: a dead engine makes Serve replace this replica."""
        if self._omni_engine is not None and not self._omni_engine.is_alive():
            raise EngineDeadError(f"replica {self._omni_replica}: the engine is dead")

    async def __del__(self) -> None:
        if self._omni_engine is not None:
            await asyncio.to_thread(self._omni_engine.shutdown)


def _replica_id() -> str:
    from ray import serve

    context = serve.get_replica_context()
    return f"{context.replica_id.unique_id}@{os.getpid()}"


def deployment(
    replicas: int = 1, num_cpus: float = 0.1, ray_actor_options: dict[str, Any] | None = None
) -> Any:
    """The Serve deployment (``num_replicas`` replicas, each reserving ``num_cpus``)."""
    from ray import serve

    if replicas < 1:
        raise StartupError(f"ray serve: replicas must be at least 1 (got {replicas})")
    options = {"num_cpus": num_cpus, **(ray_actor_options or {})}
    ingress = serve.ingress()(OmniServeReplica)
    return serve.deployment(
        ingress,
        name=DEPLOYMENT,
        num_replicas=replicas,
        ray_actor_options=options,
        health_check_period_s=2.0,
        health_check_timeout_s=30.0,
    )


def omni_app(
    pipeline: Any,
    *,
    replicas: int = 1,
    settings: OmniSettings | None = None,
    api_key: str | None = None,
    max_inflight: int | None = None,
    public_metrics: bool = False,
    load_plugins: bool = True,
    num_cpus: float = 0.1,
    ray_actor_options: dict[str, Any] | None = None,
) -> Any:
    """A Serve application serving ``pipeline`` (a :class:`PipelineConfig`, a pipeline file or a
    shipped pipeline's name) from ``replicas`` replicas: pass it to ``serve.run``."""
    from omni_core.config.pipeline import PipelineConfig

    settings = settings or OmniSettings()
    if not isinstance(pipeline, PipelineConfig):
        from omni_core.config.resolve import is_existing_path, load_pipeline
        from omni_core.plugin.hooks import PluginHost

        target: Any = Path(pipeline) if is_existing_path(str(pipeline)) else pipeline
        pipeline = load_pipeline(target, PluginHost.create(settings))
    spec = {
        "pipeline": pipeline,
        "settings": settings.model_dump(),
        "api_key": api_key,
        "max_inflight": max_inflight if max_inflight is not None else settings.max_inflight,
        "public_metrics": public_metrics or settings.public_metrics,
        "load_plugins": load_plugins,
    }
    return deployment(replicas, num_cpus, ray_actor_options).bind(spec)


def run_ray_serve(
    pipeline: Any,
    *,
    settings: OmniSettings,
    host: str,
    port: int,
    replicas: int,
    api_key: str | None,
    max_inflight: int,
    public_metrics: bool = False,
) -> None:
    """``omni serve --ray-serve``: start Serve's proxy on ``host:port``, run the application,
    wait for SIGTERM/SIGINT, then take the application and Serve down."""
    import ray
    from ray import serve

    from omni_core.stage.ray_local import LocalRay

    local: LocalRay | None = None
    address = getattr(pipeline, "ray_address", None) or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    else:
        local = LocalRay(os.cpu_count() or 1, float(settings.startup_timeout_s))
        local.start()
        local.join()
        logger.info(
            "ray serve: started a local Ray on %s (supervisor pid %s)",
            local.address,
            local.info.get("pid"),
        )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": host, "port": port})
        app = omni_app(
            pipeline,
            replicas=replicas,
            settings=settings,
            api_key=api_key,
            max_inflight=max_inflight,
            public_metrics=public_metrics,
        )
        serve.run(app, name="omni", route_prefix="/", blocking=False)
        logger.info(
            "serving %s on http://%s:%d through Ray Serve (%d replicas)",
            pipeline.name,
            host,
            port,
            replicas,
        )
        while not stop.wait(0.5):
            pass
        logger.info("ray serve: stopping")
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            if local is not None:
                local.stop()
                logger.info("ray serve: stopped the local Ray")
