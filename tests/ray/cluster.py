"""A simulated multi-node Ray cluster for tests: ``ray.cluster_utils.Cluster`` (a head and extra
raylets on this host, each with its own resources, object store and workers), on loopback.

This process may already be connected to the session's local Ray (``local_ray`` in conftest):
it leaves it, joins the cluster, and joins the local Ray again afterwards. Ray's single-machine
switch is set for as long as the cluster lives, so every node and the driver use ``127.0.0.1``
(without it the driver would look for the GCS at the machine's IP).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from omni_core.stage.ray_placement import state_address

LOOPBACK = "127.0.0.1"
STORE = 80 * 1024 * 1024  # object store per node: the tests move kilobytes


@contextlib.contextmanager
def simulated_cluster(head_cpus: float, workers: list[dict[str, Any]]) -> Iterator[Any]:
    """Start a head (with the dashboard: the state API) and one node per ``workers`` entry
    (``num_cpus``, ``resources``); yield the ``Cluster`` with this process joined; stop it all."""
    import ray
    import ray._private.ray_constants as ray_constants
    from ray.cluster_utils import Cluster

    previous = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    ray.shutdown()
    saved_env = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    saved_switch = ray_constants.ENABLE_RAY_CLUSTER
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    cluster = None
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "node_ip_address": LOOPBACK,
                "include_dashboard": True,
                "dashboard_host": LOOPBACK,
                "dashboard_port": free_port(),  # not Ray's defaults: another Ray may hold them
                "dashboard_agent_listen_port": free_port(),
                "object_store_memory": STORE,
            },
        )
        for node in workers:
            cluster.add_node(node_ip_address=LOOPBACK, object_store_memory=STORE, **node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        wait_state_api()
        yield cluster
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = saved_switch
        if saved_env is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved_env
        if previous is not None:
            ray.init(address=previous, log_to_driver=False, logging_level=logging.ERROR)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_state_api(timeout_s: float = 60.0) -> None:
    """The dashboard (state API) answers a little after the head started."""
    from ray.util.state import list_nodes

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            list_nodes(address=state_address(), limit=10)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def node_with(resource: str) -> list[str]:
    """Ids of the alive nodes declaring ``resource``."""
    import ray

    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]


def actor_nodes(actor_ids: list[str | None]) -> list[str]:
    """The node each actor runs on (state API), in the order asked."""
    from ray.util.state import get_actor

    nodes = []
    for actor_id in actor_ids:
        assert actor_id is not None
        state = get_actor(actor_id, address=state_address())
        assert state is not None and state.state == "ALIVE", (actor_id, state)
        nodes.append(state.node_id)
    return nodes


def stage_actors_alive() -> list[str]:
    """Ids of the ALIVE stage actors of the whole cluster."""
    from ray.util.state import list_actors

    alive = list_actors(
        address=state_address(),
        filters=[("state", "=", "ALIVE"), ("class_name", "=", "StageActor")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return [a.actor_id for a in alive]


def omni_groups_not_removed() -> list[tuple[str, str]]:
    """(name, state) of the engines' placement groups that are not REMOVED."""
    from omni_core.stage.ray_placement import placement_groups

    return [(n, s) for n, s in placement_groups() if s != "REMOVED"]
