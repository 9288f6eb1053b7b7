"""The core's request seams, driven by a small test plugin (no first-party plugin involved):
companions (hidden, same replica, ending at a chosen stage), forward gates (defer, release,
extra sources, transform), abort expansion."""

from __future__ import annotations

import asyncio
import types

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import Admission, Companion, ForwardGate
from omni_core.testing import prompt_tokens
from tests.helpers import by_stage, collect, expected_tokens

PIPE = """
name: seams
stages:
  - {id: 0, name: enc, kind: scripted, replicas: 2, engine_args: {num_tokens: 3}}
  - {id: 1, name: dec, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""


def seam_plugin(log: dict):
    module = types.ModuleType("seam_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(request_id, prompt):
        if request_id.endswith("-side"):
            return None
        return Admission(companions=(Companion(suffix="-side", prompt="zz", final_stage=0),))

    @hookimpl
    def omni_stage_submitted(request_id, stage_id, replica):
        log.setdefault("submitted", []).append((request_id, stage_id, replica))

    @hookimpl
    def omni_forward_gate(request_id, stage_id, port):
        if request_id.endswith("-side"):
            return None
        side = port.request(request_id + "-side")
        if side is not None and not side.stages[0].finished:
            log["deferred"] = log.get("deferred", 0) + 1
            log["port"] = port
            return ForwardGate(defer=True)
        return ForwardGate(transform=lambda tokens: list(reversed(tokens)))

    @hookimpl
    def omni_request_terminal(request_id, port):
        if request_id.endswith("-side"):
            parent = request_id.removesuffix("-side")
            run = port.request(parent)
            if run is not None and run.stages[1].deferred:
                port.release_forward(parent, 1)

    for name, value in list(locals().items()):
        if name.startswith("omni_"):
            setattr(module, name, value)
    return module


async def test_companion_is_hidden_ends_at_its_stage_and_gate_transforms(
    fake_entry_points, make_engine
):
    log: dict = {}
    fake_entry_points.add("seams", seam_plugin(log))
    engine = make_engine(PIPE)
    outs = await collect(engine, "ab", request_id="r")
    assert {o.request_id for o in outs} == {"r"}  # the companion never reaches the caller
    enc = expected_tokens("enc", prompt_tokens("ab"), 3)
    assert by_stage(outs) == {"dec": expected_tokens("dec", list(reversed(enc)), 2)}
    submitted = log["submitted"]
    side = [s for s in submitted if s[0] == "r-side"]
    main = [s for s in submitted if s[0] == "r"]
    assert [s[1] for s in side] == [0]  # ends at stage 0
    assert side[0][2] == main[0][2]  # same replica as its request
    assert log["deferred"] == 1  # held until the companion finished, then released
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_aborting_the_request_aborts_its_companion(fake_entry_points, make_engine):
    log: dict = {}
    fake_entry_points.add("seams", seam_plugin(log))
    engine = make_engine(PIPE.replace("num_tokens: 3}", "num_tokens: 3, delay_s: 0.05}"))
    gen = engine.generate("ab", request_id="r")
    task = asyncio.ensure_future(collect_rest(gen))
    await asyncio.sleep(0.02)
    result = await engine.abort_async("r")
    assert result.success and result.outputs[-1].finished
    assert (await task)[-1].finish_reason == "abort"
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def collect_rest(gen):
    return [o async for o in gen]


class ArrayLike:
    """Like a numpy array or a tensor: its truth value is ambiguous."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def __bool__(self):
        raise ValueError("the truth value of an array with more than one element is ambiguous")

    def __str__(self):
        return str(self.tokens)


async def test_a_gate_transform_returning_an_array_is_forwarded(fake_entry_points, make_engine):
    module = types.ModuleType("array_gate")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    module.omni_forward_gate = hookimpl(lambda request_id: ForwardGate(transform=ArrayLike))
    fake_entry_points.add("array_gate", module)
    engine = make_engine(PIPE)
    outs = await collect(engine, "ab")
    assert sum(o.finished for o in outs) == 1 and outs[-1].finish_reason == "stop"
    assert engine.is_alive()
