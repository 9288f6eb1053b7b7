"""A terminal request leaves no stage working on it (upstream stream sources included)."""

from __future__ import annotations

import asyncio

import pytest

from omni_core import SamplingParams
from tests.helpers import collect

# The final stage ends (an end of sequence) after 2 outputs while its upstream, which streams into
# it, has ~400 slow tokens left: the request is complete long before the upstream would finish.
EARLY_FINAL = """
name: early-final
stages:
  - {{id: 0, name: thinker, kind: scripted, engine_args: {{num_tokens: 400, delay_s: 0.005, process: {process}}}}}
  - {{id: 1, name: talker, kind: scripted, inputs: [{{stage: 0, mode: stream, chunk: 2}}], engine_args: {{num_tokens: 1, stop_after: 2, process: {process}}}, final_output: true, final_output_type: audio}}
"""


async def _running(engine, stage_id: int) -> list[str]:
    states = await engine.collective_rpc("get_state", stage_ids=[stage_id])
    return [rid for state in states for rid in state["running"]]


async def _outputs_of(engine, stage_id: int) -> int:
    (state,) = await engine.collective_rpc("get_state", stage_ids=[stage_id])
    return state["total_outputs"]


@pytest.mark.parametrize("process", [False, True], ids=["local", "process"])
async def test_completion_aborts_the_upstream_stream_source(make_engine, process):
    engine = make_engine(EARLY_FINAL.format(process=str(process).lower()))
    outputs = await collect(engine, "hi", request_id="r")
    assert [o.finished for o in outputs].count(True) == 1 and outputs[-1].finished
    assert outputs[-1].finish_reason == "stop" and len(outputs[-1].token_ids) == 1
    assert await _running(engine, 0) == []  # the thinker stopped working on the finished request
    before = await _outputs_of(engine, 0)
    await asyncio.sleep(0.1)
    assert await _outputs_of(engine, 0) == before < 400  # and produces nothing more for it
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_completion_of_parallel_samples_aborts_each_childs_upstream(make_engine):
    engine = make_engine(EARLY_FINAL.format(process="false"))
    outputs = await collect(engine, "hi", request_id="r", sampling_params=SamplingParams(n=3))
    assert [o.finished for o in outputs].count(True) == 1 and outputs[-1].finished
    assert {o.index for o in outputs} == {0, 1, 2}
    assert await _running(engine, 0) == []
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_a_finished_id_can_be_reused_at_once(make_engine):
    """The abort of the upstream reaches the replica before the caller sees the terminal, so a
    new request with the same id is not hit by it."""
    engine = make_engine(EARLY_FINAL.format(process="false"))
    first = await collect(engine, "hi", request_id="r")
    second = await collect(engine, "hi", request_id="r")
    assert [o.token_ids for o in second] == [o.token_ids for o in first]
    assert second[-1].finished and second[-1].finish_reason == "stop"
    assert await _running(engine, 0) == []


LONG_STREAM = """
name: long-stream
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 400, delay_s: 0.005}}
  - {id: 1, name: talker, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}], engine_args: {num_tokens: 1}, final_output: true, final_output_type: audio}
"""


@pytest.mark.parametrize("how", ["abort", "timeout", "error"])
async def test_every_other_terminal_also_leaves_no_stage_working(make_engine, how):
    engine = make_engine(LONG_STREAM)
    params = None
    if how == "timeout":
        params = SamplingParams(deadline_s=0.2)
    elif how == "error":
        params = SamplingParams(extra={"scripted": {"fail_after": 3, "stages": ["talker"]}})
    gen = engine.generate("hi", request_id="r", sampling_params=params)
    outputs = [await gen.__anext__()]
    if how == "abort":
        engine.abort("r")
    outputs += [o async for o in gen]
    assert [o.finished for o in outputs].count(True) == 1 and outputs[-1].finished
    assert outputs[-1].finish_reason == {"abort": "abort", "timeout": "timeout"}.get(how, "error")
    assert await _running(engine, 0) == [] and await _running(engine, 1) == []
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
