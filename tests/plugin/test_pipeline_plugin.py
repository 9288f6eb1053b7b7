"""Plugin API 3: a plugin object per pipeline (``omni_pipeline_plugin``), taking part in that
pipeline's hooks only and unregistered when its engine shuts down; ``run_id`` in every hook
(``request_id`` its deprecated alias); ``pipeline`` a PipelineView everywhere; observers fire
after the output is recorded."""

from __future__ import annotations

import types
import warnings
from typing import Any

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.settings import OmniSettings
from omni_core.errors import StartupError
from omni_core.plugin.hooks import PluginHost
from tests.helpers import collect

PIPELINE = """
name: {name}
stages:
  - {{id: 0, name: s0, kind: scripted, engine_args: {{num_tokens: 3}}, final_output: true}}
"""


class Counter:
    """Per-pipeline state: what this pipeline's hooks saw."""

    def __init__(self, pipeline: Any, port: Any) -> None:
        self.pipeline = pipeline
        self.port = port
        self.admitted: list[str] = []
        self.recorded: list[tuple[int, int]] = []  # (tokens in the output, tokens recorded)
        self.admit_pipeline: Any = None

    @hookimpl
    def omni_admit_request(self, run_id: str, pipeline: Any, port: Any) -> None:
        self.admit_pipeline = (pipeline, port.pipeline)

    @hookimpl
    def omni_request_admitted(self, run_id: str, request: Any) -> None:
        assert run_id == request.run_id
        self.admitted.append(run_id)

    @hookimpl
    def omni_stage_output(self, request: Any, stage_id: int, output: Any) -> None:
        recorded = request.stages[stage_id].result.token_ids
        self.recorded.append((len(output.token_ids), len(recorded)))


def counting_plugin(made: list[Counter]) -> types.ModuleType:
    module = types.ModuleType("counting")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def omni_pipeline_plugin(pipeline: Any, port: Any) -> Counter:
        made.append(Counter(pipeline, port))
        return made[-1]

    module.omni_pipeline_plugin = hookimpl(omni_pipeline_plugin)  # type: ignore[attr-defined]
    return module


def host_with(*plugins: tuple[str, Any]) -> PluginHost:
    return PluginHost.create(OmniSettings(), load_entry_points=False, extra_plugins=list(plugins))


async def test_each_pipeline_gets_its_own_object_which_leaves_with_its_engine(make_engine):
    made: list[Counter] = []
    host = host_with(("counting", counting_plugin(made)))
    first = make_engine(PIPELINE.format(name="first"), plugins=host)
    second = make_engine(PIPELINE.format(name="second"), plugins=host)
    assert [c.pipeline.config.name for c in made] == ["first", "second"]
    assert made[0].port is not made[1].port

    await collect(first, "hi", request_id="a")
    await collect(second, "hi", request_id="b")
    await collect(second, "hi", request_id="c")
    assert made[0].admitted == ["a"]
    assert made[1].admitted == ["b", "c"]
    assert len(host.pm.pipeline_objects) == 2

    first.shutdown()
    assert len(host.pm.pipeline_objects) == 1
    assert made[0] not in [p for _, p in host.pm.list_name_plugin()]
    await collect(second, "hi", request_id="d")
    assert made[0].admitted == ["a"] and made[1].admitted == ["b", "c", "d"]
    second.shutdown()
    assert host.pm.pipeline_objects == {}


async def test_observers_see_the_output_recorded_and_admission_a_pipeline_view(make_engine):
    made: list[Counter] = []
    engine = make_engine(
        PIPELINE.format(name="p"), plugins=host_with(("counting", counting_plugin(made)))
    )
    await collect(engine, "hi", request_id="r")
    (counter,) = made
    # each output is already part of the stage's result when the observer sees it
    total = 0
    for added, recorded in counter.recorded:
        total += added
        assert recorded == total
    assert total == 3
    pipeline, port_pipeline = counter.admit_pipeline
    assert pipeline is port_pipeline  # the PipelineView, as in omni_applies_to
    assert pipeline.config.name == "p" and 0 in pipeline.stages


def test_an_object_implementing_a_global_hook_fails_the_start_naming_the_plugin(make_engine):
    class Greedy:
        @hookimpl
        def omni_register_bridges(self) -> list[Any]:
            return []

    module = types.ModuleType("greedy")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]
    module.omni_pipeline_plugin = hookimpl(lambda: Greedy())  # type: ignore[attr-defined]
    host = host_with(("greedy", module))
    with pytest.raises(StartupError) as info:
        make_engine(PIPELINE.format(name="g"), plugins=host)
    message = str(info.value)
    assert "plugin 'greedy'" in message
    assert "pipeline 'g' implements omni_register_bridges" in message
    assert host.pm.pipeline_objects == {}


async def test_request_id_is_a_deprecated_alias_of_run_id(make_engine):
    seen: list[tuple[str, str]] = []
    module = types.ModuleType("old_names")
    module.OMNI_PLUGIN_API_VERSION = 2  # type: ignore[attr-defined]

    def omni_request_terminal(request_id: str, request: Any) -> None:
        seen.append((request_id, request.run_id))

    module.omni_request_terminal = hookimpl(omni_request_terminal)  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="'request_id' is deprecated: take 'run_id'"):
        host = host_with(("old", module))
    engine = make_engine(PIPELINE.format(name="p"), plugins=host)
    await collect(engine, "hi", request_id="r1")
    assert seen == [("r1", "r1")]


def test_run_id_impls_register_without_a_warning():
    module = types.ModuleType("new_names")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]
    module.omni_request_terminal = hookimpl(lambda run_id: None)  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        host_with(("new", module))
