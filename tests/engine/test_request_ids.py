"""Caller ids never meet the ids the engine derives (children, companions), and n is bounded."""

from __future__ import annotations

import asyncio
import types

import pytest

from omni_core import PLUGIN_API_VERSION, RequestError, SamplingParams, hookimpl
from omni_core.plugin.types import Admission, Companion
from tests.helpers import CHAIN, collect

SLOW = CHAIN.replace("delay_s: 0.001", "delay_s: 0.05")


@pytest.mark.parametrize(
    ("request_id", "message"),
    [
        ("0_p", "reserved"),
        ("12_", "reserved"),
        ("007_x_y", "reserved"),
        ("a\x00b", "control characters"),
        ("line\nbreak", "control characters"),
        ("", "non-empty string"),
        (5, "non-empty string"),
    ],
)
async def test_ids_a_caller_may_not_use_are_refused(make_engine, request_id, message):
    engine = make_engine(CHAIN)
    with pytest.raises(RequestError, match=message):
        await collect(engine, "x", request_id=request_id)
    assert engine.is_alive() and engine.num_active_requests == 0


@pytest.mark.parametrize("request_id", ["p_0", "0x_1", "x0_", "_0_", "p 1", "ünï"])
async def test_ids_outside_the_namespace_are_fine(make_engine, request_id):
    engine = make_engine(CHAIN)
    outs = await collect(engine, "x", request_id=request_id)
    assert outs[-1].finished and outs[-1].finish_reason == "stop"
    assert {o.request_id for o in outs} == {request_id}


async def test_a_caller_cannot_take_a_childs_id_and_both_keep_one_terminal(make_engine):
    engine = make_engine(SLOW)
    parent = engine.generate("x", request_id="p", sampling_params=SamplingParams(n=2))
    first = await parent.__anext__()
    with pytest.raises(RequestError, match="reserved"):
        await collect(engine, "y", request_id="0_p")  # child 0 of "p" is in flight
    rest = [o async for o in parent]
    outs = [first, *rest]
    assert [o.finished for o in outs].count(True) == 1 and outs[-1].finished
    assert {o.index for o in outs} == {0, 1}
    # closing a request after such an attempt leaves the engine serving
    again = engine.generate("x", request_id="q", sampling_params=SamplingParams(n=2))
    await again.__anext__()
    await again.aclose()
    assert (await collect(engine, "z"))[-1].finished
    assert engine.is_alive()


def companion_plugin():
    module = types.ModuleType("side_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(request_id, prompt):
        return Admission(companions=(Companion(suffix="-side", prompt="zz", final_stage=0),))

    module.omni_admit_request = omni_admit_request
    return module


async def test_ids_colliding_with_companions_are_refused_without_harm(
    fake_entry_points, make_engine
):
    fake_entry_points.add("side", companion_plugin())
    engine = make_engine(SLOW)
    a = engine.generate("x", request_id="a")  # its companion runs as "a-side"
    await a.__anext__()
    taken = await collect(engine, "y", request_id="a-side")
    b_side = engine.generate("x", request_id="b-side")  # in flight before "b" arrives ...
    await b_side.__anext__()
    refused = await collect(engine, "y", request_id="b")  # ... whose companion is "b-side"
    for outs in (taken, refused):
        assert len(outs) == 1 and outs[0].finished and outs[0].finish_reason == "error"
        assert outs[0].error.status_code == 400 and "already in flight" in outs[0].error.message
    for gen in (a, b_side):
        rest = [o async for o in gen]
        assert rest[-1].finished and rest[-1].finish_reason == "stop"
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    assert engine.is_alive()


async def test_n_is_bounded_by_max_n(make_engine, omni_settings):
    engine = make_engine(CHAIN, settings=omni_settings.model_copy(update={"max_n": 3}))
    with pytest.raises(RequestError, match=r"n: 4 parallel samples asked, at most 3"):
        await collect(engine, "x", sampling_params=SamplingParams(n=4))
    with pytest.raises(RequestError, match="OMNI_MAX_N"):
        await collect(engine, "x", sampling_params={"thinker": {"n": 4}})
    outs = await collect(engine, "x", sampling_params={"thinker": {"n": 3}})
    assert {o.index for o in outs} == {0, 1, 2}


def test_max_n_defaults_to_16_and_reads_the_environment(monkeypatch):
    from omni_core.config.settings import OmniSettings

    monkeypatch.delenv("OMNI_MAX_N", raising=False)
    assert OmniSettings().max_n == 16
    monkeypatch.setenv("OMNI_MAX_N", "4")
    assert OmniSettings().max_n == 4


async def test_the_orchestrator_refuses_what_reaches_it_unchecked(make_engine):
    """An id in the children's namespace or an n over the bound that reaches the orchestrator
    without the engine's checks (another engine class, a plugin) still gets one 400 terminal."""
    from omni_core.engine.channel import RequestStream
    from omni_core.messages import AddRequest

    engine = make_engine(CHAIN)
    runtime = engine._runtime
    results = {}
    for rid, n in (("0_raw", 1), ("raw", engine.settings.max_n + 1)):
        stream = RequestStream(rid, asyncio.get_running_loop())
        params = {sid: SamplingParams(n=n) for sid in engine.default_params}
        runtime.inbox.put_nowait(
            AddRequest(request_id=rid, prompt="x", params=params, stream=stream)
        )
        await asyncio.wait_for(stream.wait(), 10)
        results[rid] = list(stream.items)
    for outs in results.values():
        assert len(outs) == 1 and outs[0].finish_reason == "error"
        assert outs[0].error.status_code == 400
    assert "reserved" in results["0_raw"][0].error.message
    assert "OMNI_MAX_N" in results["raw"][0].error.message
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
