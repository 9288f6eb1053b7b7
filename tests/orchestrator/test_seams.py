"""One mechanism per decision: an orchestrator subclass overriding every seam (no ``super()``)
does not switch the plugins' hooks off, and each seam is called where architecture.md says."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from omni_core import PLUGIN_API_VERSION, AsyncOmniEngine, PipelineConfig, PluginHost, hookimpl
from omni_core.orchestrator.turn import Orchestrator
from tests.helpers import collect

PIPE = """
name: seams
stages:
  - {id: 0, name: enc, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: dec, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""


def observer(log: list[tuple[Any, ...]]) -> types.ModuleType:
    module = types.ModuleType("observer")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    async def ticking() -> None:
        log.append(("plugin task",))
        await asyncio.Event().wait()

    async def closing() -> None:
        log.append(("plugin shutdown",))

    def intercept(request_id, stage_id, output):
        log.append(("plugin intercept", stage_id))
        return None

    impls = {
        "omni_stage_submitted": lambda request_id, stage_id: log.append(("hook", stage_id)),
        "omni_request_terminal": lambda request_id: log.append(("hook terminal", request_id)),
        "omni_background_tasks": lambda: [ticking],
        "omni_shutdown": lambda: closing,
        "omni_intercept_stage_output": intercept,
    }
    for name, function in impls.items():
        setattr(module, name, hookimpl(function))
    return module


def engine_with(orchestrator_class: type[Orchestrator], settings: Any, host: PluginHost) -> Any:
    class Engine(AsyncOmniEngine):
        def create_orchestrator(self, **kwargs: Any) -> Orchestrator:
            return orchestrator_class(**kwargs)

    return Engine(PipelineConfig.from_yaml_text(PIPE), settings=settings, plugins=host)


async def test_overriding_every_seam_keeps_every_hook(omni_settings):
    log: list[tuple[Any, ...]] = []

    class Overriding(Orchestrator):
        def background_tasks(self):
            async def mine() -> None:
                log.append(("seam task",))
                await asyncio.Event().wait()

            return [mine]

        async def shutdown_extensions(self) -> None:
            log.append(("seam shutdown",))

        def on_stage_submitted(self, run, stage_id, replica):
            log.append(("seam", stage_id))

        def intercept_stage_output(self, run, stage_id, output):
            log.append(("seam intercept", stage_id))
            return False

        def on_runs_ended(self, run_ids, finish_reason, error):
            log.append(("seam terminal", *run_ids))

    host = PluginHost.create(
        omni_settings, load_entry_points=False, extra_plugins=[("observer", observer(log))]
    )
    engine = engine_with(Overriding, omni_settings, host)
    try:
        outs = await collect(engine, "ab", request_id="r")
        assert outs[-1].finished and outs[-1].finish_reason == "stop"
    finally:
        engine.shutdown()
    assert {("seam task",), ("plugin task",)} <= set(log)
    submits = [e for e in log if e[0] in ("seam", "hook")]
    assert submits == [("seam", 0), ("hook", 0), ("seam", 1), ("hook", 1)]  # seam, then hook
    intercepts = [e for e in log if "intercept" in e[0]]
    assert intercepts[:2] == [("plugin intercept", 0), ("seam intercept", 0)]  # plugins first
    assert len(intercepts) == 2 * (3 + 2)  # every output of both stages, both asked
    terminals = [e for e in log if "terminal" in e[0]]
    assert terminals == [("seam terminal", "r"), ("hook terminal", "r")]
    shutdowns = [e for e in log if "shutdown" in e[0]]
    assert shutdowns == [("seam shutdown",), ("plugin shutdown",)]


async def test_a_plugin_consuming_an_output_is_not_overruled_by_the_seam(omni_settings):
    seen: list[int] = []

    class Watching(Orchestrator):
        def intercept_stage_output(self, run, stage_id, output):
            seen.append(stage_id)
            return False

    module = types.ModuleType("eater")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    # consumes every output of stage 0 but its last (the forward to stage 1 still happens)
    module.omni_intercept_stage_output = hookimpl(
        lambda stage_id, output: True if stage_id == 0 and not output.finished else None
    )
    host = PluginHost.create(
        omni_settings, load_entry_points=False, extra_plugins=[("eater", module)]
    )
    engine = engine_with(Watching, omni_settings, host)
    try:
        outs = await collect(engine, "ab")
    finally:
        engine.shutdown()
    assert outs[-1].finish_reason == "stop"
    assert seen == [0, 1, 1]  # the two consumed outputs never reached the seam
