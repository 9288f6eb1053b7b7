"""Forward gates on ``stream`` edges (hold the opening, transform every chunk) and the order in
which several plugins' transforms compose."""

from __future__ import annotations

import asyncio
import types
from types import SimpleNamespace

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.settings import OmniSettings
from omni_core.orchestrator.gates import ask_gates
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import ForwardGate
from omni_core.testing import prompt_tokens
from tests.helpers import by_stage, collect, expected_tokens

STREAM = """
name: stream
stages:
  - {id: 0, name: up, kind: scripted, engine_args: {num_tokens: 6, delay_s: 0.002}}
  - {id: 1, name: down, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
"""


def gate_plugin(state: dict) -> types.ModuleType:
    module = types.ModuleType("stream_gate")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_forward_gate(request_id, stage_id, port):
        state["asked"].append((request_id, stage_id))
        state["port"] = port
        if state["hold"]:
            return ForwardGate(defer=True)
        return ForwardGate(transform=state["transform"])

    module.omni_forward_gate = omni_forward_gate
    return module


def plus_one(tokens):
    return [t + 1 for t in tokens]


async def test_an_open_stream_edge_asks_the_gates_once_and_transforms_every_chunk(
    make_engine, fake_entry_points
):
    state = {"asked": [], "hold": False, "transform": plus_one}
    fake_entry_points.add("gate", gate_plugin(state))
    outs = await collect(make_engine(STREAM), "s", request_id="r")
    assert state["asked"] == [("r", 1)]  # asked when the talker's request opens, not per chunk
    up = expected_tokens("up", prompt_tokens("s"), 6)
    chunks = [plus_one(up[i : i + 2]) for i in (0, 2, 4)]
    assert by_stage(outs) == {"down": [t for c in chunks for t in expected_tokens("down", c, 2)]}
    assert outs[-1].finished and sum(o.finished for o in outs) == 1


async def test_a_held_stream_edge_buffers_until_released(make_engine, fake_entry_points):
    state = {"asked": [], "hold": True, "transform": lambda tokens: list(reversed(tokens))}
    fake_entry_points.add("gate", gate_plugin(state))
    engine = make_engine(STREAM)
    task = asyncio.ensure_future(collect(engine, "s", request_id="r"))
    for _ in range(500):  # until the upstream finished while the downstream is held
        (up_state,) = await engine.collective_rpc("get_state", stage_ids=[0])
        if state["asked"] and up_state["total_outputs"] == 6:
            break
        await asyncio.sleep(0.01)
    (down_state,) = await engine.collective_rpc("get_state", stage_ids=[1])
    assert down_state["total_outputs"] == 0 and not task.done()  # nothing reached the talker
    assert state["asked"] == [("r", 1)]  # asked once; held chunks do not ask again
    state["hold"] = False
    port = state["port"]
    port.loop.call_soon_threadsafe(port.release_forward, "r", 1)
    outs = await asyncio.wait_for(task, 10)
    assert state["asked"] == [("r", 1), ("r", 1)]  # asked again at the release
    # everything buffered while held goes as one closed input, through the transform
    up = expected_tokens("up", prompt_tokens("s"), 6)
    assert by_stage(outs) == {"down": expected_tokens("down", list(reversed(up)), 2)}
    assert outs[-1].finished and sum(o.finished for o in outs) == 1
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


def transform_plugin(name: str, mark: int, order: int = 0) -> tuple[str, types.ModuleType]:
    module = types.ModuleType(f"gate_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_forward_gate(request_id, stage_id):
        return ForwardGate(transform=lambda prompt: [*prompt, mark], order=order)

    module.omni_forward_gate = omni_forward_gate
    return name, module


RUN = SimpleNamespace(run_id="r")  # what the gates are asked about (a RequestView)


def composed(*plugins: tuple[str, types.ModuleType]) -> list[int]:
    host = PluginHost.create(OmniSettings(), load_entry_points=False, extra_plugins=list(plugins))
    verdict = ask_gates(host, RUN, 1, None)
    assert verdict is not None
    return verdict.apply([0])


def test_transforms_compose_by_order_then_plugin_name_whatever_the_registration_order():
    a, b, c = (
        transform_plugin("alpha", 1),
        transform_plugin("beta", 2),
        transform_plugin("gamma", 3),
    )
    assert composed(a, b, c) == composed(c, b, a) == composed(b, c, a) == [0, 1, 2, 3]
    early = transform_plugin("zeta", 9, order=-1)  # a lower order goes first, whatever the name
    late = transform_plugin("aardvark", 7, order=5)
    assert composed(a, late, early, b) == composed(b, early, late, a) == [0, 9, 1, 2, 7]


def test_one_deferring_gate_holds_the_forward_and_extra_sources_are_collected():
    def plugin(name, gate):
        module = types.ModuleType(f"gate_{name}")
        module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
        module.omni_forward_gate = hookimpl(lambda request_id: gate)
        return name, module

    extra = plugin("extra", ForwardGate(extra_sources=("x",)))
    held = plugin("held", ForwardGate(defer=True))
    host = PluginHost.create(OmniSettings(), load_entry_points=False, extra_plugins=[extra, held])
    assert ask_gates(host, RUN, 1, None) is None
    host = PluginHost.create(OmniSettings(), load_entry_points=False, extra_plugins=[extra])
    verdict = ask_gates(host, RUN, 1, None)
    assert verdict is not None and verdict.extra_sources == ("x",) and verdict.apply(5) == 5
