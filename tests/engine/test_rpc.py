"""Control RPCs: per-replica results, worker errors propagate, engine stays up; correlation."""

from __future__ import annotations

import asyncio
import threading

import pytest

from omni_core import EngineDeadError, RpcError
from omni_core.engine.rpc import RpcRouter
from tests.helpers import collect

PIPE = """
name: rpc
stages:
  - {id: 0, name: a, kind: scripted, replicas: 2, engine_args: {num_tokens: 2}, final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 2, rpc_error: true}, final_output: true, final_output_type: audio}
"""


async def test_one_result_per_addressed_replica_in_stage_order(make_engine):
    engine = make_engine(PIPE)
    assert await engine.sleep(stage_ids=[0]) == [{"ok": True, "method": "sleep"}] * 2
    assert await engine.wake_up(stage_ids=[0]) == [{"ok": True, "method": "wake_up"}] * 2
    echo = await engine.collective_rpc("echo", args=(1, 2), kwargs={"k": 3}, stage_ids=[0])
    assert echo == [{"args": [1, 2], "kwargs": {"k": 3}}] * 2


@pytest.mark.parametrize("method", ["sleep", "wake_up", "pause_scheduler", "resume_scheduler"])
async def test_control_rpc_worker_errors_reach_the_caller_and_engine_stays_up(make_engine, method):
    engine = make_engine(PIPE)
    with pytest.raises(RpcError, match=f"{method} failed on stage 'b' \\(id 1\\) replica 0"):
        await getattr(engine, method)(stage_ids=[1])
    assert engine.is_alive()
    assert (await collect(engine, "x"))[-1].finished


async def test_other_unsupported_methods_answer_supported_false(make_engine):
    engine = make_engine(PIPE)
    results = await engine.collective_rpc("no_such_method", stage_ids=[0])
    assert [r["supported"] for r in results] == [False, False]
    assert "no RPC 'no_such_method'" in results[0]["error"]


async def test_invalid_stage_ids_are_a_clear_error(make_engine):
    engine = make_engine(PIPE)
    with pytest.raises(RpcError, match=r"unknown stage id\(s\) \[7\]"):
        await engine.collective_rpc("get_state", stage_ids=[7])


async def test_pause_stops_progress_and_resume_continues(make_engine):
    engine = make_engine(PIPE.replace(", rpc_error: true", ""))
    await engine.pause_scheduler(stage_ids=[0])
    task = asyncio.ensure_future(collect(engine, "x"))
    await asyncio.sleep(0.05)
    assert not task.done()
    await engine.resume_scheduler(stage_ids=[0])
    assert (await task)[-1].finished


async def test_timeout_does_not_cancel_submitted_work(make_engine):
    engine = make_engine(PIPE)
    with pytest.raises(TimeoutError):
        await engine.collective_rpc("get_state", timeout=0)
    assert len(await engine.collective_rpc("get_state")) == 3
    assert engine._runtime.router.pending == 0


def test_router_routes_out_of_order_and_drops_late_results():
    router = RpcRouter()
    a = router.register(("x", "1"))
    b = router.register(("x", "2"))
    router.deliver(("x", "2"), "two")
    router.deliver(("x", "1"), "one")
    assert (a.result(), b.result()) == ("one", "two")
    router.deliver(("x", "3"), "late")  # nobody waits: dropped
    with pytest.raises(Exception, match="already waiting"):
        router.register(("p", "k")) and router.register(("p", "k"))


def test_router_fatal_is_broadcast_and_latched():
    router = RpcRouter()
    waiters = [router.register(("n", str(i))) for i in range(3)]
    released = threading.Event()

    def wait_all():
        for w in waiters:
            with pytest.raises(EngineDeadError):
                w.result(timeout=5)
        released.set()

    thread = threading.Thread(target=wait_all)
    thread.start()
    router.fail_all(RuntimeError("engine died"))
    thread.join(5)
    assert released.is_set()
    with pytest.raises(EngineDeadError, match="engine died"):
        router.register(("n", "new"))


def test_router_close_unblocks_waiters():
    router = RpcRouter()
    waiter = router.register(("n", "1"))
    router.close()
    with pytest.raises(EngineDeadError, match="RPC router closed"):
        waiter.result(timeout=1)
