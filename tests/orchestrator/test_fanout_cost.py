"""Parallel sampling costs the orchestrator work linear in n: no per-child scan of the request's
children or of the request tables, whether the children finish, are aborted or one fails.

Measured as an operation count, not a time: every element visited while iterating a request's
live children, the run table or a replica's bindings is counted.
"""

from __future__ import annotations

from typing import Any

import pytest

from omni_core import SamplingParams
from omni_core.orchestrator.state import ParentState
from tests.helpers import collect

PIPE = """
name: fanout
stages:
  - {id: 0, name: a, kind: scripted, replicas: 2, engine_args: {num_tokens: 3, delay_s: 0.01}, final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""
VISITS = [0]


class CountingSet(set):
    def __iter__(self):
        for item in set.__iter__(self):
            VISITS[0] += 1
            yield item


class CountingDict(dict):
    def __iter__(self):
        for key in dict.__iter__(self):
            VISITS[0] += 1
            yield key

    def keys(self) -> Any:
        return list(iter(self))

    def values(self) -> Any:
        return [dict.__getitem__(self, k) for k in self]

    def items(self) -> Any:
        return [(k, dict.__getitem__(self, k)) for k in self]


@pytest.fixture
def counted(make_engine, omni_settings, monkeypatch):
    """An engine whose request tables count the elements visited while iterating them."""
    monkeypatch.setattr(
        "omni_core.orchestrator.admission.ParentState",
        lambda rid, stream: ParentState(rid, stream, live=CountingSet()),
    )
    engine = make_engine(PIPE, settings=omni_settings.model_copy(update={"max_n": 1000}))
    orchestrator = engine._runtime.orchestrator
    orchestrator.table.runs = orchestrator.router.runs = CountingDict()
    for sid, slots in orchestrator.table.bound.items():
        orchestrator.table.bound[sid] = [CountingSet() for _ in slots]
    return engine


async def complete(engine: Any, n: int) -> None:
    outs = await collect(engine, "x", sampling_params=SamplingParams(n=n))
    assert outs[-1].finished and outs[-1].finish_reason == "stop"


async def abort(engine: Any, n: int) -> None:
    gen = engine.generate("x", request_id=f"abort-{n}", sampling_params=SamplingParams(n=n))
    await gen.__anext__()
    result = await engine.abort_async(f"abort-{n}")
    assert result.success
    assert [o async for o in gen][-1].finish_reason == "abort"


async def fail(engine: Any, n: int) -> None:
    faulty = SamplingParams(n=n, extra={"scripted": {"fail_after": 1, "stages": ["b"]}})
    outs = await collect(engine, "x", sampling_params=faulty)
    assert outs[-1].finish_reason == "error"


@pytest.mark.parametrize("scenario", [complete, abort, fail])
async def test_work_per_child_does_not_grow_with_n(counted, scenario):
    visits = {}
    for n in (10, 100):
        VISITS[0] = 0
        await scenario(counted, n)
        visits[n] = VISITS[0]
    assert counted.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    # linear: 10x the children, at most ~10x the visits (a per-child scan would be ~100x)
    assert visits[100] <= 12 * visits[10] + 20, visits
