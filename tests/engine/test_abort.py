"""Abort: fire-and-forget and acknowledged; prefixes, whole-sample retry, commit-after-success."""

from __future__ import annotations

import asyncio

import pytest

from omni_core import SamplingParams
from omni_core.testing import prompt_tokens
from tests.helpers import collect, expected_tokens

SLOW = """
name: slow
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 50, delay_s: 0.005}, final_output: true, final_output_type: text}
  - {id: 1, name: vocoder, kind: scripted, inputs: [0], engine_args: {num_tokens: 3}, final_output: true, final_output_type: audio}
"""

WHOLE = """
name: image
stages:
  - {id: 0, name: encoder, kind: scripted, engine_args: {num_tokens: 2}}
  - {id: 1, name: dit, kind: scripted, inputs: [0], engine_args: {num_tokens: 50, delay_s: 0.005, output: whole}, final_output: true, final_output_type: image}
"""


async def take(gen, n):
    return [await gen.__anext__() for _ in range(n)]


async def test_acknowledged_abort_gives_terminal_with_generated_prefix(make_engine):
    engine = make_engine(SLOW)
    gen = engine.generate("hi", request_id="r")
    seen = await take(gen, 3)
    result = await engine.abort_async("r")
    assert result.success and result.error is None
    # one abort output per unfinished final stage, in stage order; only the last is terminal
    assert [(o.stage_name, o.finished, o.finish_reason) for o in result.outputs] == [
        ("thinker", False, "abort"),
        ("vocoder", True, "abort"),
    ]
    prefix = result.outputs[0].token_ids
    assert len(prefix) >= 3
    assert prefix == expected_tokens("thinker", prompt_tokens("hi"), 50)[: len(prefix)]
    assert prefix[:3] == [t for o in seen for t in o.token_ids]
    assert result.outputs[0].text.split() == [f"thinker:{t}" for t in prefix]
    rest = [o async for o in gen]  # the caller receives the same abort outputs and stops
    assert [o.finish_reason for o in rest if o.finish_reason] == ["abort", "abort"]
    assert rest[-1].finished and sum(o.finished for o in rest) == 1
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_fire_and_forget_abort_terminates_the_stream(make_engine):
    engine = make_engine(SLOW)
    gen = engine.generate("hi", request_id="r")
    await take(gen, 1)
    engine.abort("r")
    rest = [o async for o in gen]
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    assert engine.num_active_requests == 0


async def test_abort_of_whole_output_stage_is_whole_sample_retry(make_engine):
    engine = make_engine(WHOLE)
    gen = engine.generate("hi", request_id="img")
    task = asyncio.ensure_future(collect_rest(gen))
    await asyncio.sleep(0.05)
    result = await engine.abort_async("img")
    assert result.success
    [out] = result.outputs
    assert out.finished and out.finish_reason == "abort" and out.whole_sample_retry
    assert out.token_ids == [] and out.payload is None
    assert [o.whole_sample_retry for o in await task] == [True]


async def collect_rest(gen):
    return [o async for o in gen]


async def test_abort_reaches_only_the_stages_the_request_reached(make_engine):
    engine = make_engine(SLOW.replace("num_tokens: 3}", "num_tokens: 3, abort_fails: true}"))
    gen = engine.generate("hi", request_id="r")
    await take(gen, 1)
    result = await engine.abort_async("r")  # the vocoder never saw it: its abort is not called
    assert result.success


async def test_failed_physical_abort_keeps_the_request_abortable(make_engine):
    engine = make_engine(SLOW.replace("delay_s: 0.005}", "delay_s: 0.005, abort_fails: true}"))
    gen = engine.generate("hi", request_id="r")
    await take(gen, 1)
    result = await engine.abort_async("r")
    assert not result.success and "abort_fails" in result.error
    assert result.outputs == []
    assert engine.num_active_requests == 1  # nothing committed: still in flight
    more = await take(gen, 1)  # and still streaming
    assert not more[0].finished
    await gen.aclose()


async def test_abort_unknown_or_finished_is_a_quiet_noop_and_ids_can_be_reused(make_engine):
    engine = make_engine(SLOW.replace("num_tokens: 50", "num_tokens: 2"))
    assert (await engine.abort_async("never-seen")).outputs == []
    first = await collect(engine, "a", request_id="again")
    assert (await engine.abort_async("again")).outputs == []
    gen = engine.generate("a", request_id="again")
    await take(gen, 1)
    await engine.abort_async("again")
    await gen.aclose()
    second = await collect(engine, "a", request_id="again")
    assert [o.token_ids for o in second] == [o.token_ids for o in first]


async def test_closing_the_generator_aborts_the_request(make_engine):
    engine = make_engine(SLOW)
    gen = engine.generate("hi", request_id="r")
    await take(gen, 2)
    await gen.aclose()
    await wait_for(lambda: engine.num_active_requests == 0)
    state = await engine.collective_rpc("get_state", stage_ids=[0])
    assert state[0]["running"] == []  # the engine stopped working on it


async def test_break_out_of_async_for_aborts(make_engine):
    engine = make_engine(SLOW)
    async with asyncio.timeout(5):
        gen = engine.generate("hi")
        async for _ in gen:
            break
        await gen.aclose()
    await wait_for(lambda: engine.num_active_requests == 0)


async def test_cancelling_the_consumer_task_aborts(make_engine):
    engine = make_engine(SLOW)
    task = asyncio.ensure_future(collect(engine, "hi", request_id="c"))
    await asyncio.sleep(0.03)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: engine.num_active_requests == 0)


async def test_deadline_expiry_aborts_with_timeout(make_engine):
    engine = make_engine(SLOW)
    outs = await collect(engine, "hi", sampling_params=SamplingParams(deadline_s=0.05))
    assert outs[-1].finished and outs[-1].finish_reason == "timeout"
    assert sum(o.finished for o in outs) == 1
    assert engine.num_active_requests == 0


async def test_aborting_children_of_parallel_sampling(make_engine):
    engine = make_engine(SLOW)
    gen = engine.generate("hi", request_id="p", sampling_params={"thinker": {"n": 2}})
    await take(gen, 2)
    first = await engine.abort_async("0_p")
    assert first.success and not any(o.finished for o in first.outputs)
    assert {o.index for o in first.outputs} == {0}
    assert engine.num_active_requests == 1  # the parent lives while a child lives
    last = await engine.abort_async("1_p")
    assert last.outputs[-1].finished and last.outputs[-1].index == 1
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    rest = [o async for o in gen]
    assert sum(o.finished for o in rest) == 1


async def wait_for(predicate, timeout=5.0):
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)
