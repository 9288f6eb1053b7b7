"""Races between a request's terminals: a failure whose physical abort is still waiting for its
acknowledgement while an abort (or a completion) ends the request must not add a second one."""

from __future__ import annotations

import asyncio
import types

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.outputs import ErrorInfo, StageOutput
from omni_core.plugin.types import StageKind
from omni_core.stage.local import LocalStageClient
from omni_core.testing.scripted import ScriptedArgs

GATED = """
name: gated
stages:
  - {id: 0, name: g, kind: gated, final_output: true}
"""


class Gated(LocalStageClient):
    """Takes requests and emits nothing by itself; its first abort waits for the test."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.requests: list[str] = []
        self.aborts = 0
        self.first_abort: asyncio.Future[None] | None = None

    async def add_request(self, request):
        self.requests.append(request.request_id)

    async def abort(self, request_ids):
        self.aborts += 1
        if self.aborts == 1:
            self.first_abort = asyncio.get_running_loop().create_future()
            await self.first_abort


def gated_plugin(clients: list[Gated]) -> types.ModuleType:
    module = types.ModuleType("gated_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def make(stage, replica, context):
        clients.append(Gated())
        return clients[-1]

    module.omni_register_stage_kinds = hookimpl(  # type: ignore[attr-defined]
        lambda: [StageKind("gated", make, ScriptedArgs)]
    )
    return module


async def until(condition) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


async def test_abort_while_a_failure_awaits_its_abort_gives_one_terminal(
    fake_entry_points, make_engine
):
    clients: list[Gated] = []
    fake_entry_points.add("gated", gated_plugin(clients))
    engine = make_engine(GATED)
    client = clients[0]
    loop = engine._runtime.orchestrator.loop
    gen = engine.generate("x", request_id="r")
    first = asyncio.ensure_future(gen.__anext__())
    await until(lambda: client.requests == ["r"])
    stream = engine._runtime.streams["r"]
    error = ErrorInfo(type="Boom", message="request-scoped failure")
    loop.call_soon_threadsafe(client.emit, StageOutput(request_id="r", error=error))
    await until(lambda: client.aborts == 1)  # the failure's physical abort is in flight
    result = await engine.abort_async("r")  # meanwhile the caller aborts: that one ends it
    assert result.success
    terminal = await first
    assert terminal.finished and terminal.finish_reason == "abort"
    loop.call_soon_threadsafe(client.first_abort.set_result, None)  # the failure resumes
    await until(lambda: engine.num_active_requests == 0)
    await asyncio.sleep(0.05)
    assert list(stream.items) == []  # no second terminal (an "error") after the abort's
    await gen.aclose()
