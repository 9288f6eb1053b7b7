"""The ray runtime on a simulated multi-node cluster (``ray.cluster_utils.Cluster``: a head and
two worker nodes on this host, each its own raylet, object store and workers): stages pinned by
custom resources, SPREAD, placement groups, unplaceable pipelines, and the loss of a node.

One cluster for the module (~10 s to start); the node-loss test comes last (it removes a node).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest

import omni_core
from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.engine.factory import create_engine
from omni_core.errors import OmniError
from omni_core.plugin.hooks import PluginHost
from omni_core.stage.ray_placement import state_address
from tests.helpers import by_stage, chain, collect
from tests.ray.cluster import (
    actor_nodes,
    node_with,
    omni_groups_not_removed,
    simulated_cluster,
    stage_actors_alive,
)
from tests.ray.helpers import clean_env, omni_run, thinker_lines

pytestmark = pytest.mark.timeout(180)

WORKERS = [
    {"num_cpus": 1, "resources": {"thinker_node": 1, "worker": 1, "slot": 1}},
    {"num_cpus": 1, "resources": {"talker_node": 1, "worker": 1, "slot": 1}},
]

PINNED = """
name: pinned
runtime: ray
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 4}, final_output: true,
     resources: {num_cpus: 0.1, custom: {thinker_node: 0.5}}}
  - {id: 1, name: talker, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}],
     engine_args: {num_tokens: 3}, final_output: true, final_output_type: audio,
     resources: {num_cpus: 0.1, custom: {talker_node: 0.5}}}
"""

# one slot per worker node: a replica of a lost node has nowhere else to go
FIXED = """
name: fixed
runtime: ray
stages:
  - {id: 0, name: fixed, kind: scripted, replicas: 2, engine_args: {num_tokens: 3},
     final_output: true, restart: {policy: on-failure, max_restarts: 1, backoff_s: 0.05},
     resources: {num_cpus: 0.1, custom: {slot: 1}}}
"""


@pytest.fixture(scope="module")
def cluster():
    with simulated_cluster(head_cpus=1, workers=WORKERS) as c:
        yield c
        assert stage_actors_alive() == []
        assert omni_groups_not_removed() == []


def make(text: str, startup_timeout_s: float = 60.0):
    settings = OmniSettings(startup_timeout_s=startup_timeout_s, shutdown_timeout_s=20.0)
    host = PluginHost.create(settings, load_entry_points=False)
    config = PipelineConfig.from_yaml_text(text, source="<multinode test>")
    return create_engine(config, settings=settings, plugins=host)


def actor_ids(engine, stage_id: int) -> list[str | None]:
    return [c.actor_id for c in engine._runtime.stages.pools[stage_id].clients]


def test_pinned_stages_run_on_the_nodes_they_ask_for(cluster):
    engine = make(PINNED)
    try:
        [thinker_node] = node_with("thinker_node")
        [talker_node] = node_with("talker_node")
        assert thinker_node != talker_node
        assert actor_nodes(actor_ids(engine, 0)) == [thinker_node]
        assert actor_nodes(actor_ids(engine, 1)) == [talker_node]
        outs = asyncio.run(collect(engine, "hello", modalities=["text", "audio"]))
        tokens = by_stage(outs)
        thinker = chain("hello", ("thinker", 4))[0]
        assert tokens["thinker"] == thinker  # the stream edge crossed nodes, chunk by chunk
        assert tokens["talker"] == [
            t for i in (0, 2) for t in chain(thinker[i : i + 2], ("talker", 3))[0]
        ]
        ids = set(actor_ids(engine, 0) + actor_ids(engine, 1))
    finally:
        engine.shutdown()
    assert not ids & set(stage_actors_alive())


def test_spread_puts_a_stages_replicas_on_different_nodes(cluster):
    engine = make("""
name: spread
runtime: ray
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2, engine_args: {num_tokens: 3},
     final_output: true, resources: {num_cpus: 0.1, custom: {worker: 0.1}, strategy: SPREAD}}
""")
    try:
        nodes = actor_nodes(actor_ids(engine, 0))
        assert len(set(nodes)) == 2 and set(nodes) == set(node_with("worker"))

        async def two():
            return await asyncio.gather(collect(engine, "a"), collect(engine, "b"))

        assert [outs[-1].finish_reason for outs in asyncio.run(two())] == ["stop", "stop"]
    finally:
        engine.shutdown()


def test_placement_group_strict_spread_one_replica_per_node_then_removed(cluster):
    engine = make("""
name: group-spread
runtime: ray
placement_group: STRICT_SPREAD
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 3, engine_args: {num_tokens: 3},
     final_output: true, resources: {num_cpus: 0.1}}
""")
    try:
        backend = engine._runtime.stages.backend
        name = backend.placement.name
        assert omni_groups_not_removed() == [(name, "CREATED")]
        assert len(set(actor_nodes(actor_ids(engine, 0)))) == 3  # head and both workers
        assert asyncio.run(collect(engine, "x"))[-1].finish_reason == "stop"
    finally:
        engine.shutdown()
    assert omni_groups_not_removed() == []
    assert stage_actors_alive() == []


def test_placement_group_strict_pack_puts_every_replica_on_one_node(cluster):
    engine = make("""
name: packed
runtime: ray
placement_group: STRICT_PACK
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2, engine_args: {num_tokens: 2},
     resources: {num_cpus: 0.1}}
  - {id: 1, name: talker, kind: scripted, inputs: [0], engine_args: {num_tokens: 2},
     final_output: true, resources: {num_cpus: 0.2}}
""")
    try:
        nodes = actor_nodes(actor_ids(engine, 0) + actor_ids(engine, 1))
        assert len(set(nodes)) == 1
        assert asyncio.run(collect(engine, "x"))[-1].finish_reason == "stop"
    finally:
        engine.shutdown()
    assert omni_groups_not_removed() == []


def pinned_tiny_omni() -> str:
    """tiny-omni with runtime ray, the thinker on the thinker node, talker and vocoder on the
    talker node (amounts no other test asks for: its actors are found by them afterwards)."""
    text = (Path(omni_core.__file__).parent / "pipelines" / "tiny-omni.yaml").read_text()
    pins = {
        "thinker": "thinker_node: 0.3",
        "talker": "talker_node: 0.3",
        "vocoder": "talker_node: 0.35",
    }
    text = text.replace("name: tiny-omni\n", "name: tiny-omni\nruntime: ray\n")
    for stage, pin in pins.items():
        line = f"    name: {stage}\n"
        assert line in text
        text = text.replace(line, f"{line}    resources: {{num_cpus: 0.1, custom: {{{pin}}}}}\n")
    return text


@pytest.mark.timeout(400)
def test_tiny_omni_pinned_to_nodes_matches_local(cluster, tmp_path, tiny_omni_local):
    """Real vLLM stages on the nodes they ask for (state API), audio from the talker node's
    vocoder to the driver through the object store: text and WAV as `--runtime local`."""
    from ray.util.state import list_actors

    pipeline = tmp_path / "tiny-omni-pinned.yaml"
    pipeline.write_text(pinned_tiny_omni())
    joined = {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}
    env = clean_env(
        OMNI_LOG_LEVEL="INFO",
        RAY_ADDRESS=cluster.address,
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # the simulated cluster lives on loopback
        **joined,
    )
    run = omni_run(str(pipeline), tmp_path / "out", env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"joined the cluster at {cluster.address}" in run.stderr
    assert thinker_lines(run.stdout) == tiny_omni_local["text"]
    [wav] = (tmp_path / "out").glob("*.wav")
    assert wav.read_bytes() == tiny_omni_local["wav"]
    actors = list_actors(
        address=state_address(),
        filters=[("class_name", "=", "StageActor")],
        detail=True,
        limit=10_000,
    )
    where = {}
    for actor in actors:
        need = actor.required_resources or {}
        for resource, amount in (
            ("thinker_node", 0.3),
            ("talker_node", 0.3),
            ("talker_node", 0.35),
        ):
            if need.get(resource) == amount:
                assert actor.state == "DEAD"  # the run shut them down
                where[(resource, amount)] = actor.node_id
    [thinker_node] = node_with("thinker_node")
    [talker_node] = node_with("talker_node")
    assert where == {
        ("thinker_node", 0.3): thinker_node,
        ("talker_node", 0.3): talker_node,
        ("talker_node", 0.35): talker_node,
    }


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (
            "",
            "stage 'talker' (id 1) replica 0 failed to start: StartupError: not placed on the "
            "Ray cluster within ",
        ),
        ("placement_group: PACK", "placement group (2 bundles, strategy PACK) not placed"),
    ],
)
def test_unplaceable_pipeline_fails_start_up_naming_stage_and_resource(cluster, group, expected):
    text = PINNED.replace("name: pinned", f"name: unplaceable\n{group}").replace(
        "talker_node: 0.5", "gpu_node: 1"
    )
    started = time.monotonic()
    with pytest.raises(OmniError) as err:
        make(text, startup_timeout_s=8.0)
    elapsed = time.monotonic() - started
    message = str(err.value)
    assert expected in message, message
    assert "stage 'talker' asks for {CPU: 0.1, gpu_node: 1} per replica" in message
    assert "no alive node has resource 'gpu_node'" in message
    assert "thinker_node" in message and "talker_node" in message  # what the nodes do declare
    assert "s (bounded by OMNI_STARTUP_TIMEOUT_S): stage 'talker' asks for" in message
    assert elapsed < 8.0 + 5.0  # the engine's start-up bound (and its clean-up)
    assert stage_actors_alive() == []
    assert omni_groups_not_removed() == []


@pytest.mark.parametrize(
    ("group", "replicas", "expected"),
    [
        (
            "STRICT_SPREAD",
            3,
            "STRICT_SPREAD needs 4 nodes (one per replica of talker, thinker); the cluster has "
            "3 alive",
        ),
        (
            "STRICT_PACK",
            1,
            "STRICT_PACK needs {CPU: 0.2, talker_node: 0.5, thinker_node: 0.5} on one node; "
            "no single alive node has all of it at once",
        ),
    ],
)
def test_a_group_no_strategy_can_place_says_why(cluster, group, replicas, expected):
    text = PINNED.replace("name: pinned", f"name: strict\nplacement_group: {group}")
    text = text.replace("engine_args: {num_tokens: 4}", f"replicas: {replicas}")
    started = time.monotonic()
    with pytest.raises(OmniError) as err:
        make(text, startup_timeout_s=3.0)
    assert time.monotonic() - started < 3.0 + 5.0
    assert f"strategy {group}) not placed on the Ray cluster within " in str(err.value)
    assert expected in str(err.value)
    assert omni_groups_not_removed() == []


def test_node_loss_fails_only_its_requests_and_restarts_where_resources_allow(cluster, caplog):
    caplog.set_level(logging.INFO)
    # flex: one placement group (SPREAD), a replica per worker; the surviving worker can take
    # the lost one's bundle. fixed: one slot per worker, so the lost replica has nowhere to go
    flex = make("""
name: flex
runtime: ray
placement_group: SPREAD
stages:
  - {id: 0, name: flex, kind: scripted, replicas: 2,
     engine_args: {num_tokens: 400, delay_s: 0.005}, final_output: true,
     restart: {policy: on-failure, max_restarts: 1, backoff_s: 0.05},
     resources: {num_cpus: 0.1, custom: {worker: 0.25}}}
""")
    fixed = None
    try:
        fixed = make(FIXED, startup_timeout_s=8.0)
        flex_nodes = actor_nodes(actor_ids(flex, 0))
        fixed_nodes = actor_nodes(actor_ids(fixed, 0))
        assert len(set(flex_nodes)) == 2 and set(fixed_nodes) == set(flex_nodes)
        victim = 0  # flex replica 0's node goes away; flex replica 1 survives
        lost = next(n for n in cluster.worker_nodes if n.node_id == flex_nodes[victim])
        survivor = flex_nodes[1 - victim]
        lost_fixed = fixed_nodes.index(lost.node_id)

        async def go():
            tasks = [asyncio.create_task(collect(flex, f"r{i}")) for i in range(4)]
            while True:  # mid-request: every request streamed on its replica
                await asyncio.sleep(0.05)
                if flex.num_active_requests == 4:
                    state = await flex.collective_rpc("get_state", stage_ids=[0])
                    if all(s["total_outputs"] >= 8 for s in state):
                        break
            await asyncio.to_thread(cluster.remove_node, lost)
            return await asyncio.gather(*tasks)

        removed_at = time.monotonic()
        results = asyncio.run(go())
        reasons = sorted(outs[-1].finish_reason for outs in results)
        assert reasons == ["error", "error", "stop", "stop"]  # round-robin: 2 per replica
        for outs in results:
            assert sum(o.finished for o in outs) == 1
            if outs[-1].finish_reason == "error":
                error = outs[-1].error
                assert error.type == "ReplicaDeadError" and error.retryable
                assert f"stage 'flex' replica {victim} died" in error.message
                assert 0 < len(outs) < 400
            else:
                assert len(outs) == 400

        # flex: Ray moved the lost node's bundle of the placement group to the surviving
        # worker, and our restart policy started a fresh replica in it
        deadline = time.monotonic() + 60
        while flex.health()["stages"]["flex"]["replicas"] != [True, True]:
            assert time.monotonic() < deadline, flex.health()
            time.sleep(0.1)
        assert actor_nodes(actor_ids(flex, 0)) == [survivor, survivor]
        assert asyncio.run(collect(flex, "after"))[-1].finish_reason == "stop"

        # fixed: no node can host its lost replica: the restart gives up within the
        # placement bound (OMNI_STARTUP_TIMEOUT_S, 8 s), saying why; the survivor serves
        def restart_failure():
            return [
                r.getMessage()
                for r in caplog.records
                if "restart of stage 'fixed'" in r.getMessage()
            ]

        while not restart_failure():
            assert time.monotonic() - removed_at < 8.0 + 20.0, fixed.health()
            time.sleep(0.1)
        [failure] = restart_failure()
        assert f"replica {lost_fixed} failed" in failure
        assert (
            "not placed on the Ray cluster within 8.0 s (bounded by OMNI_STARTUP_TIMEOUT_S)"
            in failure
        )
        assert "stage 'fixed' asks for {CPU: 0.1, slot: 1} per replica" in failure
        assert "held by other actors or placement groups ('slot' free: 0)" in failure
        health = fixed.health()["stages"]["fixed"]
        assert health["replicas"][lost_fixed] is False and health["live"]
        assert health["errors"][lost_fixed] in failure  # /health says why, too
        assert "'slot' free: 0" in health["errors"][lost_fixed]
        assert health["errors"][1 - lost_fixed] is None
        assert asyncio.run(collect(fixed, "still"))[-1].finish_reason == "stop"
    finally:
        flex.shutdown()
        if fixed is not None:
            fixed.shutdown()
    assert stage_actors_alive() == []
