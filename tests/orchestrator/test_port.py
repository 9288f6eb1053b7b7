"""The OrchestratorPort and the request views hooks receive: every action a plugin may take, driven
by a small test plugin, and views that read the live run."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.errors import PluginError
from omni_core.outputs import ErrorInfo
from omni_core.plugin.types import ForwardGate
from omni_core.testing import prompt_tokens
from tests.helpers import by_stage, collect, expected_tokens

PIPE = """
name: port
stages:
  - {id: 0, name: enc, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: dec, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""
CLEAN = {"requests": 0, "runs": 0, "bindings": 0}


def plugin(**impls: Any) -> types.ModuleType:
    module = types.ModuleType("port_user")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    for name, function in impls.items():
        setattr(module, name, hookimpl(function))
    return module


def chain(prompt: str) -> list[int]:
    return expected_tokens("dec", expected_tokens("enc", prompt_tokens(prompt), 3), 2)


async def test_views_read_the_live_run_and_the_terminal_one(fake_entry_points, make_engine):
    seen: dict[str, Any] = {"lengths": []}

    def omni_stage_output(request, stage_id):
        if stage_id == 0:  # observers see an output after it is recorded (plugin API 3)
            seen["lengths"].append(len(request.stages[0].result.token_ids))

    def omni_request_terminal(request_id, request, finish_reason, port):
        seen["terminal"] = (
            request.run_id,
            request.request_id,
            request.terminal,
            list(request.stages[1].result.token_ids),
            port.request(request_id),
            finish_reason,
        )

    fake_entry_points.add(
        "port_user",
        plugin(omni_stage_output=omni_stage_output, omni_request_terminal=omni_request_terminal),
    )
    engine = make_engine(PIPE)
    await collect(engine, "ab", request_id="v")
    assert seen["lengths"] == [1, 2, 3]
    assert seen["terminal"] == ("v", "v", True, chain("ab"), None, "stop")


async def test_fail_ends_the_request_with_the_plugins_error(fake_entry_points, make_engine):
    error = ErrorInfo(type="QuotaError", message="over quota", status_code=409)
    failed: set[str] = set()

    def omni_stage_output(request_id, stage_id, port):
        if stage_id == 0 and request_id not in failed:
            failed.add(request_id)
            port.spawn(port.fail(request_id, 0, error))

    fake_entry_points.add("port_user", plugin(omni_stage_output=omni_stage_output))
    engine = make_engine(PIPE.replace("num_tokens: 3}", "num_tokens: 3, delay_s: 0.01}"))
    outs = await collect(engine, "ab", request_id="f")
    assert [o.finish_reason for o in outs if o.finished] == ["error"]
    assert outs[-1].error == error and outs[-1].stage_name == "enc"
    assert engine.request_tables() == CLEAN


async def test_submit_sends_a_prompt_of_its_own_once(fake_entry_points, make_engine):
    state: dict[str, Any] = {}

    async def take_over(port):
        await port.submit("s", 1, [5, 6, 7])
        for args in (("s", 1, [1]), ("s", 7, [1])):  # again; a stage the run does not need
            try:
                await port.submit(*args)
            except PluginError as exc:
                state.setdefault("refused", []).append(str(exc))

    def omni_forward_gate(request_id, stage_id, port):
        port.spawn(take_over(port))
        return ForwardGate(defer=True)  # the plugin submits stage 1 itself

    fake_entry_points.add("port_user", plugin(omni_forward_gate=omni_forward_gate))
    engine = make_engine(PIPE)
    outs = await collect(engine, "ab", request_id="s")
    assert by_stage(outs) == {"dec": expected_tokens("dec", [5, 6, 7], 2)}
    assert state["refused"] == [
        "run 's' was already submitted to stage 1",
        "run 's' does not go through stage 7",
    ]
    assert engine.request_tables() == CLEAN


async def test_forward_asks_the_gates_again_and_runs_the_bridge(fake_entry_points, make_engine):
    asked: list[str] = []

    async def reopen(port, request_id):
        await asyncio.sleep(0.01)
        await port.forward(request_id, 1)

    def omni_forward_gate(request_id, stage_id, request, port):
        asked.append(request_id)
        if len(asked) == 1:
            assert request.stages[0].finished and not request.stages[1].submitted
            port.spawn(reopen(port, request_id))
            return ForwardGate(defer=True)
        return None

    fake_entry_points.add("port_user", plugin(omni_forward_gate=omni_forward_gate))
    engine = make_engine(PIPE)
    outs = await collect(engine, "ab", request_id="g")
    assert asked == ["g", "g"]
    assert by_stage(outs) == {"dec": chain("ab")} and outs[-1].finish_reason == "stop"


async def test_lookups_control_rpc_and_abort(fake_entry_points, make_engine):
    state: dict[str, Any] = {}

    async def inspect_then_abort(port, request):
        state["lookups"] = (
            port.request(request.run_id) is request,
            port.request("nope"),
            port.has_live_replica(0),
            port.has_live_replica(9),
            port.pipeline.config.name,
            port.pipeline.stages[1].name,
        )
        states = await port.collective_rpc("get_state", stage_ids=[0])
        state["rpc"] = len(states)
        result = await port.abort([request.run_id], reason="abort")
        state["aborted"] = result.success

    def omni_request_admitted(request, port):
        port.spawn(inspect_then_abort(port, request))

    fake_entry_points.add("port_user", plugin(omni_request_admitted=omni_request_admitted))
    engine = make_engine(PIPE.replace("num_tokens: 3}", "num_tokens: 3, delay_s: 0.05}"))
    outs = await collect(engine, "ab", request_id="a")
    assert state["lookups"] == (True, None, True, False, "port", "dec")
    assert state["rpc"] == 1 and state["aborted"] is True
    assert [o.finish_reason for o in outs if o.finished] == ["abort"]
    assert engine.request_tables() == CLEAN


class Sink:
    """A stream: ``push`` runs on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: list[Any] = []
        self.arrived = asyncio.Event()

    def push(self, item: Any) -> None:
        self.items.append(item)
        self.arrived.set()


async def test_emit_hands_items_to_a_stream_on_its_loop(fake_entry_points, make_engine):
    sink = Sink(asyncio.get_running_loop())

    def omni_request_admitted(request_id, port):
        port.emit(sink, ("admitted", request_id))
        port.emit(sink, ("again", request_id))

    fake_entry_points.add("port_user", plugin(omni_request_admitted=omni_request_admitted))
    engine = make_engine(PIPE)
    await collect(engine, "ab", request_id="e")
    await asyncio.wait_for(sink.arrived.wait(), 5)
    assert sink.items == [("admitted", "e"), ("again", "e")]
