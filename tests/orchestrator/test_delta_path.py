"""The router's short path for plain token deltas (``Router.on_outputs``): it records and emits
exactly what the full path (``StageResult.add``, ``_emit_stage_output``) does, without calling
them. The full path is forced by an intercept seam that consumes nothing."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from omni_core.bench.orchestration import make_engine
from omni_core.orchestrator.state import ParentState
from omni_core.outputs import StageOutput, StageResult

IDS = itertools.count()


class Stream:
    def __init__(self) -> None:
        self.loop = object()  # a destination the emitter groups by; never flushed here


@pytest.fixture(scope="module")
def orchestrator() -> Any:
    engine = make_engine(3)  # the throughput bench's fake stages: nothing is submitted to them
    yield engine._runtime.orchestrator
    engine.shutdown()


def outputs(rid: str) -> list[StageOutput]:
    return [
        StageOutput(request_id=rid, token_ids=[5]),
        StageOutput(request_id=rid, token_ids=[6, 7], text="ab"),
        StageOutput(request_id=rid, text="c"),
        StageOutput(request_id=rid),
        StageOutput(request_id=rid, token_ids=[8], prompt_token_ids=[1, 2]),  # not plain
    ]


def route(orch: Any, stage_id: int, full_path: bool, monkeypatch: Any) -> tuple[Any, ...]:
    """Route deltas of a fresh run at ``stage_id``: (what the caller got, the stage's result,
    StageResult.add calls)."""
    rid = f"d{next(IDS)}"
    adds = [0]
    real_add = StageResult.add

    def counting_add(self: StageResult, out: StageOutput) -> None:
        adds[0] += 1
        real_add(self, out)

    async def go() -> tuple[Any, ...]:
        router, table = orch.router, orch.table
        needed, finals = orch.graph.plan(None)
        run = table.new_run(rid, ParentState(rid, Stream()), 0, [0], {}, needed, finals)
        table.add(run)
        sr = run.stages[stage_id]
        sr.replica, sr.submitted = 0, True
        table.bind(stage_id, 0, rid)
        emitted: list[Any] = []
        monkeypatch.setattr(orch.emitter, "emit", lambda stream, item: emitted.append(item))
        monkeypatch.setattr(StageResult, "add", counting_add)
        if full_path:
            monkeypatch.setattr(router, "intercept", lambda run, sid, out: False)
        try:
            await router.on_outputs(stage_id, 0, outputs(rid))
        finally:
            monkeypatch.undo()
            orch.terminals.terminate(run, "abort", None)
            orch.emitter._pending.clear()
        return emitted, sr.result, adds[0], sr.t_first > 0

    return asyncio.run_coroutine_threadsafe(go(), orch.loop).result(10)


@pytest.mark.parametrize("stage_id", [0, 2], ids=["inner stage", "final stage"])
def test_plain_deltas_skip_stage_result_add_and_record_and_emit_the_same(
    orchestrator, stage_id, monkeypatch
):
    short = route(orchestrator, stage_id, False, monkeypatch)
    full = route(orchestrator, stage_id, True, monkeypatch)
    assert short[2] == 1 and full[2] == 5  # only the delta with prompt token ids takes add()
    emitted, result = short[0], short[1]
    for item in [*emitted, *full[0]]:
        item.request_id = "x"  # the two runs' ids differ; everything else must not
    assert emitted == full[0]
    assert len(emitted) == (5 if stage_id == 2 else 0)
    assert [(o.text, o.token_ids) for o in emitted] == [
        ("", [5]),
        ("ab", [6, 7]),
        ("c", []),
        ("", []),
        ("", [8]),
    ][: len(emitted)]
    assert result == full[1]
    assert (result.token_ids, result.text, result.prompt_token_ids) == ([5, 6, 7, 8], "abc", [1, 2])
    assert short[3] and full[3]  # the first output's time is recorded on both paths
