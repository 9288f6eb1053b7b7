"""The benchmarks' threaded fake engine: one token per running request per step, one untaken batch
at most per replica, replicas independent though they share their loop's inbox; and the scaling
load's checks hold with several replicas per stage."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from omni_core.bench import fake
from omni_core.bench.orchestration import measure
from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest


class Sink:
    def __init__(self) -> None:
        self.batches: list[list[StageOutput]] = []
        self.deaths: list[EngineDeadError] = []

    def push(self, outputs: list[StageOutput]) -> None:
        self.batches.append(outputs)

    def dead(self, error: EngineDeadError) -> None:
        self.deaths.append(error)


def request(rid: str) -> StageRequest:
    return StageRequest(request_id=rid, prompt=[0], params=SamplingParams())


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def test_replicas_on_one_loop_step_their_own_requests_one_token_at_a_time() -> None:
    clients = [fake.FakeEngineClient(0, fake.FakeArgs(tokens=4)) for _ in range(2)]
    sinks = [Sink(), Sink()]
    for client, sink in zip(clients, sinks, strict=True):
        await client.start()
        client.set_output_sink(sink)
    try:
        await clients[0].add_request(request("a"))
        await clients[0].add_request(request("b"))
        await clients[1].add_request(request("c"))
        await until(lambda: sum(len(b) for s in sinks for b in s.batches) == 12)
        for sink, rids in zip(sinks, (("a", "b"), ("c",)), strict=True):
            for rid in rids:  # tokens 1..4 in order, the 4th finishing it
                outs = [o for b in sink.batches for o in b if o.request_id == rid]
                assert [o.token_ids for o in outs] == [[1], [2], [3], [4]]
                assert [o.finished for o in outs] == [False, False, False, True]
        assert {o.request_id for b in sinks[1].batches for o in b} == {"c"}
    finally:
        for client in clients:
            await client.shutdown()


async def test_a_pulled_batch_must_be_taken_before_the_next_step() -> None:
    client = fake.FakeEngineClient(0, fake.FakeArgs(tokens=3))
    await client.start()
    try:
        await client.add_request(request("a"))
        first = await client.get_outputs()
        await asyncio.sleep(0.05)  # released by get_outputs only after this loop turn
        second = await client.get_outputs()
        third = await client.get_outputs()
        assert [o.token_ids for o in first + second + third] == [[1], [2], [3]]
        assert client._batch is None  # nothing stepped ahead while a batch was untaken
    finally:
        await client.shutdown()


def test_the_scaling_load_checks_hold_with_eight_replicas_and_threads_end() -> None:
    before = {t for t in threading.enumerate() if t.name.startswith("fake-engine")}
    rate, cpu_us, _ = measure(3, 64, 0.2, replicas=8)  # raises CheckFailed on a wrong count
    assert rate > 0 and cpu_us > 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = {t for t in threading.enumerate() if t.name.startswith("fake-engine")} - before
        if not left:
            break
        time.sleep(0.01)
    assert not left, f"{len(left)} fake engine threads outlived their engine"
