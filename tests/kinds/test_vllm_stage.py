"""A real vLLM stage: abort with prefix, pause/resume, control RPCs, replica death isolation."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig, RpcError
from omni_core.plugin.hooks import PluginHost
from omni_core.stage.process import ProcessStageClient
from omni_core.stage.wire import Outputs
from tests.helpers import expected_tokens

PAIR = PipelineConfig.from_yaml_text("""
name: vllm-pair
stages:
  - {id: 0, name: llm, kind: vllm, replicas: 2, engine_args: {model: tiny-thinker, max_model_len: 1024},
     sampling_params: {max_tokens: 16, temperature: 0.8, seed: 3}, final_output: true}
""")
LONG = {"llm": {"max_tokens": 900, "extra": {"vllm": {"ignore_eos": True}}}}


@pytest.fixture(scope="module")
def engine():
    settings = OmniSettings()
    engine = AsyncOmniEngine(
        PAIR, settings=settings, plugins=PluginHost.create(settings, load_entry_points=False)
    )
    yield engine
    engine.shutdown()


def test_abort_after_k_tokens_gives_the_streamed_prefix(engine):
    async def go():
        streamed = []
        result = None
        gen = engine.generate("abort me", request_id="long", sampling_params=LONG)
        async for out in gen:
            if not out.finished:
                streamed.extend(out.token_ids)
            if len(streamed) >= 5 and result is None:
                result = await engine.abort_async("long")
                assert result.success
                continue
            if out.finished:
                return streamed, out, result
        raise AssertionError("no terminal")

    streamed, terminal, result = asyncio.run(go())
    assert terminal.finish_reason == "abort"
    assert 0 < len(terminal.token_ids) < 900
    assert terminal.token_ids == streamed  # the prefix is what the caller saw
    assert result.outputs[-1].token_ids == terminal.token_ids
    assert engine.num_active_requests == 0


def test_pause_stops_tokens_and_resume_restarts_them(engine):
    async def go():
        assert await engine.pause_scheduler() == [{"ok": True, "method": "pause_scheduler"}] * 2
        gen = engine.generate("paused")
        first = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.5)
        assert not first.done()  # nothing flows while paused
        await engine.resume_scheduler()
        out = await asyncio.wait_for(first, 30)
        rest = [o async for o in gen]
        return [out, *rest]

    outs = asyncio.run(go())
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert sum(len(o.token_ids) for o in outs) == 16


def test_control_rpcs_answer_per_replica_and_errors_propagate(engine):
    async def go():
        sleep = await engine.sleep(level=0)
        wake = await engine.wake_up()
        with pytest.raises(RpcError, match="sleep failed on stage 'llm'"):
            # vLLM rejects mode="wait" in-process: the worker's own error reaches the caller
            await engine.collective_rpc("sleep", kwargs={"level": 0, "mode": "wait"})
        await engine.wake_up()
        return sleep, wake

    sleep, wake = asyncio.run(go())
    assert len(sleep) == 2 and len(wake) == 2
    assert engine.is_alive()


def test_same_seed_same_tokens(engine):
    async def one():
        return [
            t
            async for o in engine.generate(
                "determinism", sampling_params={"llm": {"max_tokens": 8, "seed": 11}}
            )
            for t in o.token_ids
        ]

    async def go():
        return await one(), await one()

    a, b = asyncio.run(go())
    assert a == b and len(a) == 8


NOT_STREAMED = PipelineConfig.from_yaml_text("""
name: vllm-then-echo
stages:
  - {id: 0, name: llm, kind: vllm, engine_args: {model: tiny-thinker, max_model_len: 1024},
     sampling_params: {max_tokens: 16, temperature: 0.8, seed: 3}}
  - {id: 1, name: echo, kind: scripted, inputs: [0], engine_args: {num_tokens: 3}, final_output: true}
""")


def test_a_stage_whose_deltas_nobody_reads_sends_one_output_with_all_of_them(engine, monkeypatch):
    params = {"llm": {"max_tokens": 16, "seed": 5, "extra": {"vllm": {"ignore_eos": True}}}}

    async def tokens(eng):
        return [t async for o in eng.generate("once", sampling_params=params) for t in o.token_ids]

    streamed = asyncio.run(tokens(engine))  # the same stage, final: every delta streamed
    frames: list[int] = []
    on_frame = ProcessStageClient._on_frame

    def counting(self, frame):
        if isinstance(frame, Outputs):
            frames.append(len(frame.outputs))
        on_frame(self, frame)

    monkeypatch.setattr(ProcessStageClient, "_on_frame", counting)
    settings = OmniSettings()
    other = AsyncOmniEngine(
        NOT_STREAMED,
        settings=settings,
        plugins=PluginHost.create(settings, load_entry_points=False),
    )
    try:
        echoed = asyncio.run(tokens(other))
    finally:
        other.shutdown()
    assert len(streamed) == 16
    assert frames == [1]  # not 16: the engine was asked for the final output only
    assert echoed == expected_tokens("echo", streamed, 3)  # ... and it carried every token


def test_killing_a_replica_fails_only_its_requests(engine):
    pids = engine.health()["stages"]["llm"]["pids"]

    async def go():
        gens = {rid: engine.generate("k", request_id=rid, sampling_params=LONG) for rid in "ab"}
        firsts = {rid: await g.__anext__() for rid, g in gens.items()}
        state = await engine.collective_rpc("get_state")
        busy = [s["pid"] for s in state if s["unfinished"]]
        assert sorted(busy) == sorted(pids)  # one request per replica
        os.kill(pids[0], signal.SIGKILL)
        ends = {}
        for rid, gen in gens.items():
            outs = [firsts[rid]] + [o async for o in gen]
            ends[rid] = outs[-1]
        return ends

    ends = asyncio.run(go())
    reasons = sorted(o.finish_reason for o in ends.values())
    assert reasons == ["error", "length"]
    failed = next(o for o in ends.values() if o.finish_reason == "error")
    assert failed.error.type == "ReplicaDeadError"
    assert engine.is_alive()
    assert engine.health()["stages"]["llm"]["replicas"].count(True) == 1


def test_get_state_counts_the_engine_steps(engine):
    """``engine_steps`` (what ``omni bench pipeline`` divides per request): one step per token
    of a lone request (its prefill gives the first)."""
    once = {"llm": {"max_tokens": 16, "extra": {"vllm": {"ignore_eos": True}}}}

    async def go():
        before = sum(s["engine_steps"] for s in await engine.collective_rpc("get_state"))
        outs = [o async for o in engine.generate("steps", sampling_params=once)]
        after = sum(s["engine_steps"] for s in await engine.collective_rpc("get_state"))
        return sum(len(o.token_ids) for o in outs), after - before

    tokens, steps = asyncio.run(go())
    assert tokens == 16 and steps == 16
