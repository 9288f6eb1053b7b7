"""The base owns the request protocol and every table has one owner (docs/architecture.md):
an ``OrchestratorBase`` subclass that handles every message it is given still admits caller
requests through the base's template (the admission hooks fire), the parts are built from one
frozen context, and replica bindings live in the request table only."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest

from omni_core import PLUGIN_API_VERSION, AsyncOmniEngine, PipelineConfig, PluginHost, hookimpl
from omni_core.orchestrator.base import OrchestratorBase
from omni_core.orchestrator.context import PartContext
from tests.helpers import collect

PIPE = """
name: ownership
stages:
  - {id: 0, name: enc, kind: scripted, engine_args: {num_tokens: 2}}
  - {id: 1, name: dec, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""


class SwallowsEverything(OrchestratorBase):
    """A subclass that claims every message it is asked about."""

    seen: list[str] = []

    async def dispatch_message(self, msg: Any) -> bool:
        self.seen.append(type(msg).__name__)
        return True


def admitting(log: list[str]) -> types.ModuleType:
    module = types.ModuleType("admitting")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    module.omni_admit_request = hookimpl(lambda request_id: log.append(f"admit {request_id}"))
    module.omni_request_admitted = hookimpl(lambda request_id: log.append(f"admitted {request_id}"))
    return module


@pytest.fixture
def engine(omni_settings):
    log: list[str] = []
    host = PluginHost.create(omni_settings, load_entry_points=False)
    host.register(admitting(log), "admitting")

    class Engine(AsyncOmniEngine):
        def create_orchestrator(self, **kwargs: Any) -> OrchestratorBase:
            return SwallowsEverything(**kwargs)

    SwallowsEverything.seen = []
    eng = Engine(PipelineConfig.from_yaml_text(PIPE), settings=omni_settings, plugins=host)
    eng.log = log
    yield eng
    eng.shutdown()


async def test_the_base_admits_add_requests_and_fires_the_admission_hooks(engine):
    outs = await collect(engine, "hi", request_id="r1")
    assert outs[-1].finished and outs[-1].finish_reason == "stop"
    assert engine.log == ["admit r1", "admitted r1"]
    assert "AddRequest" not in SwallowsEverything.seen  # never offered to the seam
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


async def test_parts_share_one_frozen_context_and_the_table_owns_the_bindings(engine):
    orchestrator = engine._runtime.orchestrator
    ctx = orchestrator.context
    assert isinstance(ctx, PartContext)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.table = None  # type: ignore[misc]
    assert orchestrator.router.replicas is orchestrator.replicas  # built in order, not patched
    assert not hasattr(orchestrator.router, "replica_died")
    for pool in orchestrator.pools.values():
        assert not hasattr(pool, "bound")  # placement only
    table = orchestrator.table
    assert {sid: len(slots) for sid, slots in table.bound.items()} == {0: 1, 1: 1}
    table.bind(1, 0, "x")
    assert table.bindings() == 1 and table.evict(1, 0) == {"x"} and table.bindings() == 0
