"""Where replicas go on a Ray cluster: the resources a replica asks for, one placement group for a
whole pipeline (``placement_group:``), and why a replica or a group could not be placed.

A replica's **demand** is what Ray must find on one node: ``CPU`` (``num_cpus``, else Ray's
scheduling default of 1 for an actor), ``GPU``, custom resources, and ``node:<ip>`` for
``node_ip``. Under ``placement_group:`` each replica gets a bundle of exactly that demand (stage
order, then replica order), and its actor asks for the whole bundle.

When placement does not happen in time, :func:`why_unplaced` compares each demand with the alive
nodes of the cluster and names the stage and the resource that is missing (no node declares it,
or none declares enough) or says that the cluster has it but not free.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.errors import StartupError

if TYPE_CHECKING:
    from omni_core.config.pipeline import StageResources
    from omni_core.config.resolve import ResolvedPipeline

logger = logging.getLogger(__name__)

DEFAULT_ACTOR_CPUS = 1.0  # what Ray needs free on a node to place an actor without num_cpus
NOT_PLACED = "not placed on the Ray cluster"


def demand(resources: StageResources) -> dict[str, float]:
    """The Ray resources one replica of a stage needs on a single node."""
    need: dict[str, float] = {
        "CPU": DEFAULT_ACTOR_CPUS if resources.num_cpus is None else float(resources.num_cpus)
    }
    if resources.num_gpus:
        need["GPU"] = float(resources.num_gpus)
    need.update({key: float(value) for key, value in resources.custom.items()})
    if resources.node_ip:
        need[f"node:{resources.node_ip}"] = 0.001
    return {key: value for key, value in need.items() if value > 0}


def state_address() -> str | None:
    """The GCS address of the cluster this process joined, for Ray's state API: without it the
    state API guesses (``RAY_ADDRESS``, the last cluster started on this machine, or any GCS
    process it finds), which on a shared machine may be another cluster."""
    import ray

    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def _fmt(value: float) -> str:
    return f"{value:g}"


def _fmt_demand(need: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in sorted(need.items())) + "}"


def alive_nodes() -> list[dict[str, float]]:
    """Total resources of each alive node of the cluster this process joined."""
    import ray

    return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]


def missing_resource(need: dict[str, float], nodes: list[dict[str, float]]) -> str | None:
    """Why no single node could ever host ``need`` (ignoring what is in use), or None."""
    if any(all(node.get(k, 0.0) >= v for k, v in need.items()) for node in nodes):
        return None
    for key, value in sorted(need.items()):
        most = max((node.get(key, 0.0) for node in nodes), default=0.0)
        if most == 0:
            declared = sorted({k for n in nodes for k in n if not k.startswith("node:")})
            return (
                f"no alive node has resource '{key}' (the {len(nodes)} alive node(s) declare: "
                f"{', '.join(declared) or 'nothing'})"
            )
        if most < value:
            return f"no alive node has {_fmt(value)} of '{key}' (at most {_fmt(most)} on one node)"
    return "no single alive node has all of it at once"


def why_unplaced(stage: str, need: dict[str, float]) -> str:
    """One line: the stage, its demand, and what is missing on the cluster."""
    import ray

    head = f"stage '{stage}' asks for {_fmt_demand(need)} per replica"
    try:
        missing = missing_resource(need, alive_nodes())
        free = ray.available_resources()
    except Exception as exc:  # the cluster is unreachable: say so rather than guess
        return f"{head}; the cluster's resources could not be read: {exc!r}"
    if missing is not None:
        return f"{head}; {missing}"
    short = {k: free.get(k, 0.0) for k in need if free.get(k, 0.0) < need[k]}
    detail = ", ".join(f"'{k}' free: {_fmt(v)}" for k, v in sorted(short.items()))
    return f"{head}; a node declares it but it is held by other actors or placement groups" + (
        f" ({detail})" if detail else ""
    )


@dataclass
class PipelinePlacement:
    """One placement group for every replica of a pipeline; ``bundle(stage_id, replica)`` is
    where a replica's actor goes (a restarted replica goes back to its own bundle)."""

    strategy: str
    bundles: list[dict[str, float]]
    index: dict[tuple[int, int], int]
    stages: list[str]  # stage name of each bundle
    group: Any = None
    name: str = field(default_factory=lambda: f"omni-{uuid.uuid4().hex[:12]}")

    @classmethod
    def plan(cls, pipeline: ResolvedPipeline, strategy: str) -> PipelinePlacement:
        bundles: list[dict[str, float]] = []
        index: dict[tuple[int, int], int] = {}
        stages: list[str] = []
        for config in pipeline.config.stages:
            need = demand(config.resources)
            if not need:
                raise StartupError(
                    f"{pipeline.config.source}: stage '{config.name}': field 'resources': a "
                    "replica's placement-group bundle needs a resource: set num_cpus, num_gpus "
                    "or custom above 0"
                )
            for replica in range(config.replicas):
                index[(config.id, replica)] = len(bundles)
                bundles.append(need)
                stages.append(config.name)
        return cls(strategy, bundles, index, stages)

    def bundle(self, stage_id: int, replica: int) -> int:
        return self.index[(stage_id, replica)]

    def actor_strategy(self, stage_id: int, replica: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            self.group,
            placement_group_bundle_index=self.bundle(stage_id, replica),
            placement_group_capture_child_tasks=False,
        )

    async def reserve(self, timeout_s: float) -> None:
        """Create the group and wait until Ray placed it; on timeout remove it and raise a
        :class:`StartupError` naming the stage and the resource that is missing."""
        from ray.util.placement_group import placement_group

        started = time.perf_counter()
        timeout_s = max(timeout_s, 0.1)
        self.group = placement_group(self.bundles, strategy=self.strategy, name=self.name)
        try:
            await asyncio.wait_for(self.group.ready(), timeout_s)
        except TimeoutError:
            reason = await asyncio.to_thread(self.why_not_ready)
            await asyncio.to_thread(self.remove)
            raise StartupError(
                f"ray runtime: placement group ({len(self.bundles)} bundles, strategy "
                f"{self.strategy}) {NOT_PLACED} within {timeout_s:.1f} s "
                f"(bounded by OMNI_STARTUP_TIMEOUT_S): {reason}"
            ) from None
        logger.info(
            "ray runtime: placement group %s (%d bundles, %s) placed in %.1f s",
            self.name,
            len(self.bundles),
            self.strategy,
            time.perf_counter() - started,
        )

    def why_not_ready(self) -> str:
        nodes = alive_nodes()
        for stage, need in zip(self.stages, self.bundles, strict=True):
            if missing_resource(need, nodes) is not None:
                return why_unplaced(stage, need)
        if self.strategy == "STRICT_SPREAD" and len(self.bundles) > len(nodes):
            return (
                f"STRICT_SPREAD needs {len(self.bundles)} nodes (one per replica of "
                f"{', '.join(sorted(set(self.stages)))}); the cluster has {len(nodes)} alive"
            )
        if self.strategy == "STRICT_PACK":
            total: dict[str, float] = {}
            for need in self.bundles:
                for key, value in need.items():
                    total[key] = total.get(key, 0.0) + value
            missing = missing_resource(total, nodes)
            if missing is not None:
                return f"STRICT_PACK needs {_fmt_demand(total)} on one node; {missing}"
        return (
            "every replica fits some node, but the cluster has not enough free resources for "
            f"all {len(self.bundles)} at once (free now: {_free_summary(self.bundles)})"
        )

    def remove(self) -> None:
        """Release the reservation (idempotent; Ray kills actors still inside it)."""
        group, self.group = self.group, None
        if group is None:
            return
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(group)
        except Exception as exc:  # Ray already gone
            logger.debug("ray runtime: could not remove placement group %s: %r", self.name, exc)


def _free_summary(bundles: list[dict[str, float]]) -> str:
    import ray

    free = ray.available_resources()
    keys = sorted({k for b in bundles for k in b})
    return ", ".join(f"{k}: {_fmt(free.get(k, 0.0))}" for k in keys)


def placement_groups(name_prefix: str = "omni-") -> list[tuple[str, str]]:
    """(name, state) of the cluster's placement groups whose name starts with ``name_prefix``
    (state API)."""
    from ray.util.state import list_placement_groups

    groups = list_placement_groups(
        address=state_address(), limit=10_000, raise_on_missing_output=False
    )
    return [(g.name, g.state) for g in groups if (g.name or "").startswith(name_prefix)]
