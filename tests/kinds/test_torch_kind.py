"""The ``torch`` stage kind hosts an engine a module names, in a real process replica.

The engine is defined here (:func:`build`): a running sum over a torch tensor, one token per
step. The worker imports this module in the replica's own process and calls ``build`` with the
stage's resolved model, threads and options. A request that is invalid fails alone (400 from
``add``; 500 from one request's ``step``) and the replica keeps serving; an abort stops a
request mid-stream; a streamed-input request takes its chunks through ``add_input``; a missing
engine module is a config error naming ``engine_args.engine``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError
from omni_core.kinds.torch_kind import StageOutput, TorchStageEngine, error_output
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

ENGINE = "tests.kinds.test_torch_kind:build"


class RunningSum(TorchStageEngine):
    """Prompt: a list of ints (more may stream in). Each step emits the running sum of the
    values so far times ``options["scale"]``, one value per step; a value of -1 fails that
    request inside ``step``."""

    kind = "running-sum"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        self.torch = torch
        self.config = config
        self.scale = int(config["options"].get("scale", 1))
        self.step_delay_s = float(config["options"].get("step_delay_s", 0.0))
        self.requests: dict[str, dict[str, Any]] = {}

    def add(self, request: Any) -> None:
        values = request.prompt
        if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
            raise ValueError(f"prompt must be a list of ints, not {type(values).__name__}")
        self.requests[request.request_id] = {
            "pending": list(values),
            "sum": self.torch.zeros((), dtype=self.torch.int64),
            "closed": not request.streaming_input,
            "first": True,
        }

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.requests.get(request_id)
        if state is None:
            return
        state["pending"].extend(prompt or [])
        state["closed"] = state["closed"] or final

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def has_work(self) -> bool:
        return any(s["pending"] or s["closed"] for s in self.requests.values())

    def step(self) -> list[StageOutput]:
        outputs = []
        for rid, state in list(self.requests.items()):
            if state["pending"]:
                value = state["pending"].pop(0)
                if value == -1:
                    del self.requests[rid]
                    outputs.append(error_output(rid, RuntimeError(f"bad value in {rid}")))
                    continue
                state["sum"] += value
                done = state["closed"] and not state["pending"]
                payload = None
                if state["first"]:
                    state["first"] = False
                    payload = {
                        "model": self.config["model"],
                        "threads": self.config["threads"],
                        "torch_threads": self.torch.get_num_threads(),
                        "options": self.config["options"],
                        "pid": os.getpid(),
                    }
                outputs.append(
                    StageOutput(
                        request_id=rid,
                        token_ids=[int(state["sum"]) * self.scale],
                        payload=payload,
                        finished=done,
                        finish_reason="stop" if done else None,
                    )
                )
            elif state["closed"]:
                outputs.append(StageOutput(request_id=rid, finished=True, finish_reason="stop"))
            else:
                continue
            if outputs[-1].finished:
                self.requests.pop(rid, None)
        return outputs

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "active":
            return sorted(self.requests)
        return super().rpc(method, args, kwargs)


def build(config: dict[str, Any]) -> RunningSum:
    return RunningSum(config)


async def feed(prompt: Any, params: SamplingParams) -> Any:
    """A feeder stage for the streamed-input case: the prompt's values, two per chunk."""
    for i in range(0, len(prompt), 2):
        yield list(prompt[i : i + 2])
        await asyncio.sleep(0.01)


def pipeline(tmp_path: Any, **engine_args: Any) -> dict[str, Any]:
    args = {
        "engine": ENGINE,
        "model": str(tmp_path),
        "threads": 1,
        "options": {"scale": 10},
        **engine_args,
    }
    return {
        "name": "torch-kind",
        "stages": [
            {"id": 0, "name": "sum", "kind": "torch", "engine_args": args, "final_output": True}
        ],
    }


def start(config: dict[str, Any], cache: Any) -> AsyncOmniEngine:
    settings = OmniSettings(cache_dir=cache)
    return AsyncOmniEngine(
        PipelineConfig.from_dict(config),
        settings=settings,
        plugins=PluginHost.create(settings, load_entry_points=False),
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch-kind")
    engine = start(pipeline(tmp, options={"scale": 10, "step_delay_s": 0.002}), tmp / "cache")
    yield engine, tmp
    engine.shutdown()


async def collect(engine: AsyncOmniEngine, prompt: Any, **kwargs: Any) -> list[Any]:
    return [out async for out in engine.generate(prompt, **kwargs)]


def tokens(outs: list[Any]) -> list[int]:
    return [t for o in outs for t in o.token_ids]


def test_the_engine_runs_in_its_own_process_with_the_stage_config(engine):
    engine, tmp = engine
    outs = asyncio.run(collect(engine, [1, 2, 3]))
    assert tokens(outs) == [10, 30, 60]
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].error is None
    info = outs[0].payload
    assert info["pid"] != os.getpid()
    assert info["model"] == str(tmp)  # not a registered name: passed as given
    assert info["threads"] == info["torch_threads"] == 1
    assert info["options"] == {"scale": 10, "step_delay_s": 0.002}


def test_a_bad_request_fails_alone_and_the_replica_keeps_serving(engine):
    engine, _ = engine

    async def go() -> tuple[list[Any], ...]:
        return await asyncio.gather(
            collect(engine, "not a list"),
            collect(engine, [1, -1, 5]),
            collect(engine, [4, 5]),
        )

    invalid, failing, good = asyncio.run(go())
    assert invalid[-1].finish_reason == "error" and invalid[-1].error.status_code == 400
    assert "list of ints" in invalid[-1].error.message
    assert failing[-1].finish_reason == "error" and failing[-1].error.status_code == 500
    assert "bad value" in failing[-1].error.message and tokens(failing) == [10]
    assert tokens(good) == [40, 90] and good[-1].error is None
    assert tokens(asyncio.run(collect(engine, [7]))) == [70]


def test_abort_stops_a_request_mid_stream(engine):
    engine, _ = engine

    async def go() -> tuple[list[Any], list[Any]]:
        outs = []
        async for out in engine.generate(list(range(1, 2001)), request_id="long"):
            outs.append(out)
            if len(outs) == 3:
                assert (await engine.abort_async("long")).success
        return outs, await engine.collective_rpc("active")

    outs, active = asyncio.run(go())
    assert outs[-1].finished and outs[-1].finish_reason == "abort"
    assert len(outs) < 100  # stopped long before its 2000 values
    assert active == [[]]  # the replica dropped it
    assert tokens(asyncio.run(collect(engine, [2]))) == [20]


def test_a_stream_edge_feeds_the_engine_through_add_input(tmp_path):
    config = {
        "name": "torch-streamed",
        "stages": [
            {
                "id": 0,
                "name": "feeder",
                "kind": "python",
                "engine_args": {"callable": "tests.kinds.test_torch_kind:feed"},
            },
            {
                "id": 1,
                "name": "sum",
                "kind": "torch",
                "engine_args": {"engine": ENGINE},
                "inputs": [{"stage": 0, "mode": "stream"}],
                "final_output": True,
            },
        ],
    }
    engine = start(config, tmp_path)
    try:
        outs = asyncio.run(collect(engine, [1, 2, 3, 4, 5]))
    finally:
        engine.shutdown()
    assert tokens(outs) == [1, 3, 6, 10, 15]  # chunks [1, 2], [3, 4], [5]: one request
    assert outs[0].payload["model"] is None  # no model given
    assert outs[-1].finished and outs[-1].error is None


def test_engine_args_are_checked_when_the_pipeline_resolves(tmp_path):
    host = PluginHost.create(OmniSettings(cache_dir=tmp_path), load_entry_points=False)
    resolved = resolve_pipeline(PipelineConfig.from_dict(pipeline(tmp_path)), host)
    assert resolved.stages[0].args.engine == ENGINE
    assert resolved.stages[0].output_mode == "ar"
    whole = resolve_pipeline(PipelineConfig.from_dict(pipeline(tmp_path, output="whole")), host)
    assert whole.stages[0].output_mode == "whole"
    cases = [
        ({"engine": "no_such_module.sub:build"}, r"engine_args\.engine.*(?i:no module named)"),
        ({"engine": "tests.kinds.test_torch_kind"}, r"engine_args\.engine.*pkg.module:function"),
        ({"engine": "tests.kinds.test_torch_kind:nothing"}, r"engine_args\.engine.*no callable"),
        ({"voice": "x"}, r"engine_args\.voice"),
        ({"threads": 0}, r"engine_args\.threads"),
    ]
    for args, problem in cases:
        with pytest.raises(ConfigError, match=problem):
            resolve_pipeline(PipelineConfig.from_dict(pipeline(tmp_path, **args)), host)
