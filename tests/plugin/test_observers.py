"""Observer hooks fire impl by impl: one failing observer is logged, the others still run."""

from __future__ import annotations

import types

from omni_core import PLUGIN_API_VERSION, hookimpl
from tests.helpers import CHAIN, collect


def observer_plugin(name: str, seen: list, fail: bool = False):
    module = types.ModuleType(name)
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_request_admitted(request_id):
        if fail:
            raise RuntimeError("observer bug")
        seen.append(("admitted", request_id))

    @hookimpl
    def omni_stage_submitted(request_id, stage_id, replica):
        seen.append(("submitted", request_id, stage_id, replica))

    @hookimpl
    def omni_request_terminal(request_id, finish_reason):
        if fail:
            raise RuntimeError("observer bug")
        seen.append(("terminal", request_id, finish_reason))

    module.omni_request_admitted = omni_request_admitted
    module.omni_stage_submitted = omni_stage_submitted
    module.omni_request_terminal = omni_request_terminal
    return module


async def test_observers_run_even_when_one_fails(fake_entry_points, make_engine, caplog):
    seen: list = []
    fake_entry_points.add("bad", observer_plugin("bad_obs", [], fail=True))
    fake_entry_points.add("good", observer_plugin("good_obs", seen))
    engine = make_engine(CHAIN)
    outs = await collect(engine, "hi", request_id="r1")
    assert outs[-1].finished
    assert seen == [
        ("admitted", "r1"),
        ("submitted", "r1", 0, 0),
        ("submitted", "r1", 1, 0),
        ("submitted", "r1", 2, 0),
        ("terminal", "r1", "stop"),
    ]
    assert "plugin 'bad' failed in omni_request_admitted" in caplog.text
