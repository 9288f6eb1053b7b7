"""Scripted and python stages on Ray actors: same results as local, isolation on actor death,
restarts by our policy, no actor left after shutdown. One shared Ray (conftest)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.engine.factory import create_engine
from omni_core.plugin.hooks import PluginHost
from omni_core.stage.ray_client import RayStageClient
from omni_core.stage.ray_runtime import alive_actors
from tests.helpers import by_stage, chain, collect

TWO_STAGES = """
name: ray-chain
runtime: ray
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 4}, final_output: true}
  - {id: 1, name: talker, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}],
     engine_args: {num_tokens: 3}, resources: {num_cpus: 0.1}, final_output: true,
     final_output_type: audio}
  - {id: 2, name: shout, kind: python, inputs: [0], bridge: text,
     engine_args: {callable: "tests.ray.test_ray_runtime:shout"}, final_output: true}
"""

REPLICAS = """
name: ray-replicas
runtime: ray
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2, engine_args: {num_tokens: 400, delay_s: 0.005},
     final_output: true}
"""


def shout(prompt, params):
    """A ``python`` stage (client mode inside its actor): reports where it ran."""
    return f"{prompt.upper()}|pid={os.getpid()}|omp={os.environ.get('OMP_NUM_THREADS')}"


def make(text: str):
    settings = OmniSettings(startup_timeout_s=120.0, shutdown_timeout_s=20.0)
    host = PluginHost.create(settings, load_entry_points=False)
    config = PipelineConfig.from_yaml_text(text, source="<ray test>")
    return create_engine(config, settings=settings, plugins=host)


def clients(engine, stage_id: int) -> list[RayStageClient]:
    return list(engine._runtime.stages.pools[stage_id].clients)


@pytest.fixture(scope="module")
def chain_engine(local_ray):
    engine = make(TWO_STAGES)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def replicas_engine(local_ray):
    engine = make(REPLICAS)
    yield engine
    engine.shutdown()


def test_two_stage_pipeline_on_actors_matches_the_scripted_engine(chain_engine):
    outs = asyncio.run(collect(chain_engine, "hello", modalities=["text", "audio"]))
    assert outs[-1].finished and sum(o.finished for o in outs) == 1
    tokens = by_stage(outs)
    thinker = chain("hello", ("thinker", 4))[0]
    assert tokens["thinker"] == thinker
    # stream edge, chunk 2: the talker voices each 2-token chunk of the thinker
    talker = [t for i in (0, 2) for t in chain(thinker[i : i + 2], ("talker", 3))[0]]
    assert tokens["talker"] == talker
    shout_text = "".join(o.text for o in outs if o.stage_name == "shout")
    assert shout_text.startswith("THINKER:") and f"pid={os.getpid()}" not in shout_text
    # every replica is an actor in another process, and the orchestrator only sees the protocol
    for sid in (0, 1, 2):
        [client] = clients(chain_engine, sid)
        assert isinstance(client, RayStageClient) and client.pid not in (None, os.getpid())
    state = asyncio.run(chain_engine.collective_rpc("get_state", stage_ids=[0]))
    assert state[0]["pid"] == clients(chain_engine, 0)[0].pid


def test_threads_are_set_explicitly_in_actors(chain_engine, local_ray):
    # Ray would set OMP_NUM_THREADS=1 in an actor without num_cpus; ours carry the local value
    [client] = clients(chain_engine, 2)
    expected = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count())
    assert client.options["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == expected
    outs = asyncio.run(collect(chain_engine, "t"))
    assert "".join(o.text for o in outs if o.stage_name == "shout").endswith(f"|omp={expected}")
    assert client.options["max_restarts"] == 0 and "num_cpus" not in client.options
    [talker] = clients(chain_engine, 1)
    assert talker.options["num_cpus"] == 0.1


def test_killed_actor_fails_only_its_requests(replicas_engine, local_ray):
    async def go():
        tasks = [asyncio.create_task(collect(replicas_engine, f"r{i}")) for i in range(4)]
        victim = clients(replicas_engine, 0)[0]
        while True:  # mid-request: every request has produced output
            await asyncio.sleep(0.05)
            if replicas_engine.num_active_requests == 4 and victim.info:
                state = await replicas_engine.collective_rpc("get_state", stage_ids=[0])
                if all(s["total_outputs"] >= 4 for s in state):
                    break
        local_ray.kill(victim.actor, no_restart=True)
        return await asyncio.gather(*tasks)

    results = asyncio.run(go())
    reasons = sorted(outs[-1].finish_reason for outs in results)
    assert reasons == ["error", "error", "stop", "stop"]  # round-robin: 2 bound to each replica
    for outs in results:
        assert sum(o.finished for o in outs) == 1
        if outs[-1].finish_reason == "error":
            assert outs[-1].error.type == "ReplicaDeadError" and outs[-1].error.retryable
            assert 0 < len(outs) < 400  # it had streamed before the actor died
        else:
            assert len(outs) == 400
    assert replicas_engine.health()["stages"]["thinker"]["replicas"] == [False, True]
    # the survivor keeps serving
    ok = asyncio.run(
        collect(replicas_engine, "after", sampling_params={"thinker": {"max_tokens": 3}})
    )
    assert ok[-1].finish_reason == "length"


def test_restart_policy_replaces_a_dead_actor_not_ray(local_ray):
    engine = make("""
name: ray-restart
runtime: ray
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 5, die_after: 7},
     restart: {policy: on-failure, max_restarts: 1, backoff_s: 0.01}, final_output: true}
""")
    try:
        first = clients(engine, 0)[0]
        assert asyncio.run(collect(engine, "a"))[-1].finish_reason == "stop"
        second = asyncio.run(collect(engine, "b"))  # the engine exits the actor at output 7
        assert second[-1].finish_reason == "error"
        for _ in range(300):  # our policy starts a new actor
            if engine.health()["stages"]["thinker"]["replicas"] == [True]:
                break
            time.sleep(0.05)
        third = asyncio.run(collect(engine, "c"))
        assert third[-1].finish_reason == "stop"
        replaced = clients(engine, 0)[0]
        assert replaced is not first and replaced.actor_id != first.actor_id
        assert engine.health()["stages"]["thinker"]["restarts"] == 1
        assert alive_actors({first.actor_id}) == []  # Ray did not restart the dead one
    finally:
        engine.shutdown()


def test_shutdown_leaves_no_alive_actor(local_ray):
    engine = make(TWO_STAGES)
    ids = {c.actor_id for sid in (0, 1, 2) for c in clients(engine, sid)}
    assert len(ids) == 3 and set(alive_actors(ids)) == ids
    assert asyncio.run(collect(engine, "x"))[-1].finished
    backend = engine._runtime.stages.backend
    engine.shutdown()
    assert backend.alive_after_shutdown == [] and not backend.owns_ray
    assert alive_actors(ids) == []
    assert local_ray.is_initialized()  # joined, not owned: left running


def test_ray_data_plane_round_trip(local_ray):
    import numpy as np

    from omni_core.stage.dataplane import RayDataPlane, materialize

    plane = RayDataPlane()
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    handle = plane.put(array)
    assert handle.ref is not None and handle.shape == (3, 4) and handle.dtype == "float32"
    assert np.array_equal(materialize(handle, plane), array)
