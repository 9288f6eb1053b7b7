"""Pushed outputs: routed on the hand-off's stack, in order when a routing suspends; and clients
that only pull (no ``set_output_sink``) still get a reader."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.errors import EngineDeadError
from omni_core.orchestrator.intake import ReplicaIntake
from omni_core.outputs import StageOutput
from omni_core.plugin.types import StageKind
from omni_core.stage.client import PushingStageClient
from omni_core.testing.scripted import ScriptedArgs, make_scripted_client
from tests.helpers import CHAIN, by_stage, chain, collect


def out(rid: str) -> list[StageOutput]:
    return [StageOutput(request_id=rid)]


class Harness:
    def __init__(self) -> None:
        self.routed: list[str] = []
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.fatal: list[BaseException] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.intake = ReplicaIntake(self.route, self.died, self.spawn, self.fatal.append, "t")

    async def route(self, outputs: list[StageOutput]) -> None:
        rid = outputs[0].request_id
        if rid in self.gates:
            await self.gates[rid]
        if rid == "boom":
            raise ValueError("routing failed")
        self.routed.append(rid)

    async def died(self, error: EngineDeadError) -> None:
        self.routed.append(f"dead: {error}")

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(
            lambda t: t.cancelled() or t.exception() is None or self.fatal.append(t.exception())
        )
        self.tasks.append(task)
        return task


async def test_a_push_that_does_not_suspend_is_routed_before_push_returns():
    h = Harness()
    h.intake.push(out("a"))
    h.intake.dead(EngineDeadError("gone"))
    assert h.routed == ["a", "dead: gone"] and h.tasks == []


async def test_later_pushes_queue_behind_a_suspended_routing_in_order():
    h = Harness()
    h.gates["a"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("a"))
    h.intake.push(out("b"))
    h.intake.dead(EngineDeadError("gone"))
    assert h.routed == [] and len(h.tasks) == 1
    h.gates["a"].set_result(None)
    await h.tasks[0]
    assert h.routed == ["a", "b", "dead: gone"]
    h.intake.push(out("c"))  # the queue drained: eager again
    assert h.routed[-1] == "c" and len(h.tasks) == 1


async def test_a_failed_await_raises_inside_the_routing_that_waited():
    h = Harness()
    gate = h.gates["a"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("a"))
    gate.set_exception(KeyError("abort not acknowledged"))
    await asyncio.gather(*h.tasks, return_exceptions=True)
    assert [type(e) for e in h.fatal] == [KeyError] and h.routed == []


async def test_routing_errors_are_fatal_eager_or_resumed():
    h = Harness()
    h.intake.push(out("boom"))
    assert [str(e) for e in h.fatal] == ["routing failed"]
    h.gates["boom"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("boom"))
    h.gates["boom"].set_result(None)
    await asyncio.gather(*h.tasks, return_exceptions=True)
    assert [str(e) for e in h.fatal] == ["routing failed"] * 2


async def test_cancelling_a_suspended_routing_closes_what_queued_behind_it():
    h = Harness()
    h.gates["a"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("a"))
    h.intake.push(out("b"))
    h.tasks[0].cancel()
    await asyncio.gather(*h.tasks, return_exceptions=True)
    assert h.tasks[0].cancelled() and h.routed == [] and h.fatal == []
    h.intake.push(out("c"))  # usable again
    assert h.routed == ["c"]


class PullOnly:
    """A client with only the StageClient methods: the orchestrator must run a reader for it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        for name in ("start", "add_request", "add_input", "abort", "collective_rpc"):
            setattr(self, name, getattr(inner, name))
        for name in ("get_outputs", "is_healthy", "shutdown"):
            setattr(self, name, getattr(inner, name))


def pull_only_plugin() -> types.ModuleType:
    module = types.ModuleType("pull_only_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    @hookimpl
    def omni_register_stage_kinds() -> list[StageKind]:
        return [
            StageKind(
                "pull-only",
                lambda stage, i, ctx: PullOnly(make_scripted_client(stage, i, ctx)),
                ScriptedArgs,
            )
        ]

    module.omni_register_stage_kinds = omni_register_stage_kinds  # type: ignore[attr-defined]
    return module


async def test_clients_that_only_pull_are_read_by_a_reader(fake_entry_points, make_engine):
    fake_entry_points.add("pull-only", pull_only_plugin())
    engine = make_engine(CHAIN.replace("kind: scripted", "kind: pull-only"))
    client = engine._runtime.orchestrator.pools[0].client(0)
    assert not isinstance(client, PushingStageClient)
    outs = await asyncio.gather(*(collect(engine, f"p{i}") for i in range(20)))
    for i, got in enumerate(outs):
        thinker, _, vocoder = chain(f"p{i}", ("thinker", 4), ("talker", 6), ("vocoder", 3))
        assert by_stage(got) == {"thinker": thinker, "vocoder": vocoder}
    assert set(engine._runtime.orchestrator.replicas.readers) == {(0, 0), (1, 0), (2, 0)}


async def test_in_process_clients_push(make_engine):
    engine = make_engine(CHAIN)
    orchestrator = engine._runtime.orchestrator
    assert isinstance(orchestrator.pools[0].client(0), PushingStageClient)
    assert orchestrator.replicas.readers == {}
    assert len(await collect(engine, "x")) == 7


async def test_a_routing_cancelled_from_inside_is_fatal_and_drops_what_queued():
    h = Harness()
    gate = h.gates["a"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("a"))
    h.intake.push(out("b"))
    gate.cancel()  # e.g. a future the routing awaited was cancelled by someone else
    await asyncio.gather(*h.tasks, return_exceptions=True)
    assert [str(e) for e in h.fatal] == ["t: a routing was cancelled"]
    assert h.routed == []


async def test_a_late_done_callback_of_an_old_routing_leaves_the_new_queue_alone():
    h = Harness()
    h.gates["a"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("a"))
    old = h.tasks[0]
    old.cancel()
    await asyncio.gather(old, return_exceptions=True)
    h.gates["c"] = asyncio.get_running_loop().create_future()
    h.intake.push(out("c"))
    h.intake.push(out("d"))
    h.intake._finished(old)  # the old task's callback, arriving late
    h.gates["c"].set_result(None)
    await h.tasks[1]
    assert h.routed == ["c", "d"]
