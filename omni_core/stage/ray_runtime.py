"""The ``ray`` stage runtime: connects to Ray, builds :class:`RayStageClient` replicas, and leaves
no actor behind.

Connection: ``ray_address`` in the pipeline, else Ray's own ``RAY_ADDRESS``, joins a cluster; a
process where Ray is already initialized is reused; otherwise a local Ray sized for this machine
is started and stopped at shutdown (:mod:`omni_core.stage.ray_local`: it listens on loopback
only, and its supervisor takes it down when the driver ends, however it ends). Replica hosting:
the kind's ``client_factory`` builds the replica's local client, which either describes a worker
engine (``worker_spec()``: process kinds and ``scripted``) that the actor hosts directly, or is
rebuilt inside the actor as is.

Placement (:mod:`omni_core.stage.ray_placement`): with ``placement_group:`` the pipeline's
replicas are reserved as one placement group before any actor starts, and each actor goes to its
bundle; without it each actor is placed on its own. Either way, waiting for placement is bounded
by ``OMNI_STARTUP_TIMEOUT_S`` (also when a restart needs a node), and the error names the stage
and the missing resource. Shutdown removes the group.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from omni_core.errors import OmniError, StartupError
from omni_core.stage.client import StageClient, StageContext
from omni_core.stage.dataplane import PLANE_ENV
from omni_core.stage.ray_client import RayStageClient
from omni_core.stage.ray_local import LocalRay
from omni_core.stage.ray_placement import PipelinePlacement, demand, state_address

if TYPE_CHECKING:
    from omni_core.config.pipeline import StageResources
    from omni_core.config.resolve import ResolvedPipeline, ResolvedStage

logger = logging.getLogger(__name__)

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


# At start-up, placement may wait until the engine's start-up bound minus this share of it (at
# most MAX_REPORT_S): the time to say what is missing and stop what started.
REPORT_SHARE = 0.3
MAX_REPORT_S = 10.0
MIN_PLACE_S = 0.5


class ActorLeakError(OmniError):
    """Stage actors were still ALIVE after shutdown."""


class RayBackend:
    def __init__(self, pipeline: ResolvedPipeline, settings: Any) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.address = pipeline.config.ray_address or os.environ.get("RAY_ADDRESS") or None
        self.owns_ray = False
        self.clients: list[RayStageClient] = []
        self.start_s: float | None = None
        self.alive_after_shutdown: list[str] | None = None
        self.local: LocalRay | None = None  # the local Ray this runtime started
        self.placement: PipelinePlacement | None = None
        self.place_deadline = 0.0
        self.made: set[tuple[int, int]] = set()  # replicas built once: the next is a restart
        if pipeline.config.placement_group is not None:  # planned now: bad input fails early
            self.placement = PipelinePlacement.plan(pipeline, pipeline.config.placement_group)

    # --- connection -------------------------------------------------------------------------
    async def start(self) -> None:
        timeout = float(self.settings.startup_timeout_s)
        self.place_deadline = time.monotonic() + timeout - min(MAX_REPORT_S, REPORT_SHARE * timeout)
        await asyncio.to_thread(self._connect)
        if self.placement is not None:
            await self.placement.reserve(self.place_deadline - time.monotonic())

    def place_timeout(self, stage_id: int, replica: int) -> float:
        """How long a replica's actor may wait to be placed. At start-up: until the placement
        deadline, which leaves the engine's start-up bound (``OMNI_STARTUP_TIMEOUT_S``) time to
        report what is missing and clean up; a restart: ``OMNI_STARTUP_TIMEOUT_S``."""
        if (stage_id, replica) in self.made:
            return float(self.settings.startup_timeout_s)
        self.made.add((stage_id, replica))
        return max(self.place_deadline - time.monotonic(), MIN_PLACE_S)

    def _connect(self) -> None:
        try:
            import ray
        except ImportError as exc:
            raise StartupError("runtime 'ray' needs Ray: pip install 'omni-core[ray]'") from exc
        started = time.perf_counter()
        if ray.is_initialized():
            logger.info("ray runtime: reusing this process's Ray connection")
        elif self.address:
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)
            logger.info("ray runtime: joined the cluster at %s", self.address)
        else:
            local = LocalRay(os.cpu_count() or 1, float(self.settings.startup_timeout_s))
            self.local = local
            local.start()  # loopback only, under a supervisor tied to this process
            local.join()
            self.owns_ray = True
            logger.info(
                "ray runtime: started a local Ray on %s (%d CPUs, supervisor pid %s)",
                local.address,
                local.num_cpus,
                local.info.get("pid"),
            )
        self.start_s = time.perf_counter() - started

    # --- replicas ---------------------------------------------------------------------------
    def client_factory(self, stage: ResolvedStage) -> Any:
        def make(config: Any, replica: int, context: StageContext) -> StageClient:
            return self.make_client(stage, replica, context)

        return make

    def make_client(self, stage: ResolvedStage, replica: int, context: StageContext) -> Any:
        label = f"stage '{stage.name}' replica {replica} (ray)"
        local = stage.kind.client_factory(stage.config, replica, context)
        describe = getattr(local, "worker_spec", None)
        env = {PLANE_ENV: "ray", **_default_threads()}
        if describe is not None:
            worker = describe()
            spec: dict[str, Any] = {"mode": "worker", "config": worker["config"]}
            env.update(worker["env"])
            timeout = float(worker["start_timeout_s"])
            preload = tuple(worker["preload"])
        else:
            spec = {
                "mode": "client",
                "factory": stage.kind.client_factory,
                "args": (stage.config, replica, context),
            }
            timeout, preload = float(self.settings.startup_timeout_s), ()
        options = actor_options(stage.config.resources, env)
        if self.placement is not None:
            options = in_bundle(options, self.placement, stage.id, replica)
        client = RayStageClient(
            label,
            spec,
            options,
            timeout,
            preload,
            place_timeout_s=self.place_timeout(stage.id, replica),
            placing=(stage.name, demand(stage.config.resources)),
        )
        self.clients.append(client)
        return client

    # --- shutdown ---------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Every client was shut down (its actor killed): check that none is ALIVE, then stop
        the Ray this runtime started."""
        await asyncio.to_thread(self._finish)

    def _finish(self) -> None:
        import ray

        if ray.is_initialized():
            self._check_actors(ray)
        if self.local is not None:  # after ray.shutdown(): the driver has left it
            local, self.local = self.local, None
            local.stop(timeout_s=30.0)
            logger.info("ray runtime: stopped the local Ray")

    def _check_actors(self, ray: Any) -> None:
        for client in self.clients:
            client.kill()
        ids = {c.actor_id for c in self.clients if c.actor_id}
        try:
            self.alive_after_shutdown = wait_actors_gone(ids, timeout_s=10.0)
            if self.alive_after_shutdown:
                logger.error(
                    "ray runtime: actors still ALIVE after shutdown: %s", self.alive_after_shutdown
                )
        except Exception as exc:  # the state API is unavailable (no dashboard on the cluster)
            logger.warning("ray runtime: could not check actors with the state API: %r", exc)
        if self.placement is not None:
            self.placement.remove()
        if self.owns_ray:
            ray.shutdown()

    def kill(self) -> None:
        for client in self.clients:
            client.kill()
        if self.placement is not None:  # the last resort leaves no reservation either
            self.placement.remove()


def alive_actors(ids: set[str] | None = None) -> list[str]:
    """Ids of ALIVE actors (of ``ids`` when given), from Ray's state API."""
    from ray.util.state import list_actors

    alive = list_actors(
        address=state_address(),
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return [a.actor_id for a in alive if ids is None or a.actor_id in ids]


def wait_actors_gone(ids: set[str], timeout_s: float) -> list[str]:
    """Poll the state API until none of ``ids`` is ALIVE (kills are asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = alive_actors(ids) if ids else []
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def actor_options(resources: StageResources, env: dict[str, str]) -> dict[str, Any]:
    """Ray actor options of a replica: no Ray restarts (our restart policy owns them)."""
    options: dict[str, Any] = {
        "max_restarts": 0,
        "max_task_retries": 0,
        "runtime_env": {"env_vars": env},
    }
    if resources.num_cpus is not None:
        options["num_cpus"] = resources.num_cpus
    if resources.num_gpus is not None:
        options["num_gpus"] = resources.num_gpus
    custom = dict(resources.custom)
    if resources.node_ip:
        custom[f"node:{resources.node_ip}"] = 0.001
    if custom:
        options["resources"] = custom
    if resources.strategy == "SPREAD":
        options["scheduling_strategy"] = "SPREAD"
    return options


def in_bundle(
    options: dict[str, Any], placement: PipelinePlacement, stage_id: int, replica: int
) -> dict[str, Any]:
    """The actor takes its whole bundle of the pipeline's placement group."""
    need = placement.bundles[placement.bundle(stage_id, replica)]
    options = {k: v for k, v in options.items() if k not in ("num_cpus", "num_gpus", "resources")}
    options["num_cpus"] = need.get("CPU", 0.0)
    options["num_gpus"] = need.get("GPU", 0.0)
    custom = {k: v for k, v in need.items() if k not in ("CPU", "GPU")}
    if custom:
        options["resources"] = custom
    options["scheduling_strategy"] = placement.actor_strategy(stage_id, replica)
    return options


def _default_threads() -> dict[str, str]:
    """Threads of an actor whose kind sets none: what a local replica gets in this process.

    Ray sets ``OMP_NUM_THREADS=1`` in actors without ``num_cpus``; set it explicitly instead.
    """
    n = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count() or 1)
    return {var: os.environ.get(var, n) for var in THREAD_VARS}
