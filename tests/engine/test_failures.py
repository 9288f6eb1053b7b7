"""Failure isolation: request-scoped errors, replica death, restarts, orchestrator death."""

from __future__ import annotations

import asyncio
import logging

import pytest

from omni_core import EngineDeadError
from tests.helpers import collect

TWO_REPLICAS = """
name: replicas
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2, engine_args: {num_tokens: 20, delay_s: 0.002, die_after: 6}, final_output: true}
  - {id: 1, name: talker, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
"""


async def test_request_scoped_error_touches_nothing_else(make_engine):
    engine = make_engine("""
name: f
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 5, fail_after: 2}, final_output: true}
  - {id: 2, name: c, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
""")
    outs = await collect(engine, "x")
    assert sum(o.finished for o in outs) == 1
    last = outs[-1]
    assert last.finished and last.finish_reason == "error" and last.stage_name == "b"
    assert last.error.type == "ScriptedStageError" and last.error.status_code == 500
    ok = await collect(engine, "y", modalities=["audio"])  # the engine still serves
    assert ok[-1].finish_reason == "stop"
    assert engine.num_active_requests == 0 and engine.is_alive()


async def test_replica_death_fails_only_its_requests(make_engine, caplog):
    engine = make_engine(TWO_REPLICAS)
    results = await asyncio.gather(*(collect(engine, f"r{i}") for i in range(4)))
    failed = [outs[-1] for outs in results if outs[-1].finish_reason == "error"]
    # both replicas die after 6 outputs, each with 2 requests bound (round-robin)
    assert len(failed) == 4
    for out in failed:
        assert out.error.type == "ReplicaDeadError" and out.error.retryable
        assert out.error.status_code == 503
    assert all(sum(o.finished for o in outs) == 1 for outs in results)
    health = engine.health()
    assert health["alive"] and health["stages"]["thinker"]["replicas"] == [False, False]
    # no live replica left: new requests fail fast, before any state exists
    [out] = await collect(engine, "late")
    assert out.finished and out.error.type == "StageUnavailableError"
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_one_dead_replica_survivor_keeps_serving(make_engine):
    engine = make_engine(TWO_REPLICAS.replace("die_after: 6", "die_after: 3"))
    # the first request lands on replica 0; replica 0 dies at its 3rd output
    doomed = await collect(engine, "a")
    assert doomed[-1].finish_reason == "error"
    health = engine.health()["stages"]["thinker"]["replicas"]
    assert health == [False, True]
    # the survivor works while it lives (it too dies after 3 outputs: ask for 2 tokens)
    ok = await collect(engine, "b", sampling_params={"thinker": {"max_tokens": 2}})
    assert ok[-1].finish_reason == "stop"


async def test_restart_policy_replaces_a_dead_replica(make_engine, caplog):
    caplog.set_level(logging.WARNING, logger="omni_core")
    engine = make_engine("""
name: restart
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 5, die_after: 7},
     restart: {policy: on-failure, max_restarts: 2, backoff_s: 0.01}, final_output: true}
""")
    first = await collect(engine, "a")
    assert first[-1].finish_reason == "stop"  # 5 outputs
    second = await collect(engine, "b")  # dies at the 7th output: no silent replay
    assert second[-1].finish_reason == "error"
    for _ in range(200):
        if engine.health()["stages"]["thinker"]["replicas"] == [True]:
            break
        await asyncio.sleep(0.01)
    third = await collect(engine, "c")
    assert third[-1].finish_reason == "stop"
    assert engine.health()["stages"]["thinker"]["restarts"] == 1
    assert "replica 0 restarted (1/2)" in caplog.text


async def test_process_replica_killed_fails_its_request(make_engine):
    engine = make_engine("""
name: proc
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 200, delay_s: 0.005, process: true}, final_output: true}
""")
    gen = engine.generate("x")
    await gen.__anext__()
    client = engine._runtime.stages.pools[0].clients[0]
    client.kill()
    rest = [o async for o in gen]
    assert rest[-1].finished and rest[-1].error.type == "ReplicaDeadError"
    assert engine.is_alive()


async def test_orchestrator_death_releases_every_caller(make_engine):
    engine = make_engine(TWO_REPLICAS.replace("die_after: 6", "delay_s: 0.05"))
    gens = [engine.generate(f"x{i}") for i in range(3)]
    for gen in gens:
        await gen.__anext__()
    orchestrator = engine._runtime.orchestrator
    orchestrator.loop.call_soon_threadsafe(orchestrator.tasks.fatal, RuntimeError("boom"))
    for gen in gens:
        with pytest.raises(EngineDeadError, match="boom"):
            async with asyncio.timeout(5):
                async for _ in gen:
                    pass
    assert not engine.is_alive()
    with pytest.raises(EngineDeadError):
        await collect(engine, "after")
    with pytest.raises(EngineDeadError):
        await engine.collective_rpc("get_state")
