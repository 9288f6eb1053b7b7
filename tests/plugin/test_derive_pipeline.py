"""A pipeline factory that takes the plugin host derives from another registered pipeline
(``host.pipeline_config(NAME)`` + ``PipelineConfig.derive``): the host resolving it is the one
asked (no second host, its settings as set in code), and the derived pipeline runs."""

from __future__ import annotations

import types

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import PipelineSpec


def pipelines_plugin(*specs: PipelineSpec) -> types.ModuleType:
    module = types.ModuleType("fake_pipelines")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_pipelines():
        return list(specs)

    module.omni_register_pipelines = omni_register_pipelines
    return module


def short_chain(host: PluginHost) -> PipelineConfig:
    """scripted-chain (the testing kit's) with a 2-token talker; its thinker's token count from
    the host's settings (set in code)."""
    base = host.pipeline_config("scripted-chain")
    tokens = host.settings.max_n + 5
    return base.derive(
        {
            "name": "short-chain",
            "stages": [
                {"id": 0, "engine_args": {"num_tokens": tokens}},
                {"id": 1, "engine_args": {"num_tokens": 2}},
            ],
        }
    )


@pytest.fixture
def host(fake_entry_points, omni_settings):
    fake_entry_points.add("deriver", pipelines_plugin(PipelineSpec("short-chain", short_chain)))
    return PluginHost.create(omni_settings.model_copy(update={"max_n": 2}))


def test_a_factory_taking_the_host_derives_from_a_registered_pipeline(host):
    base = host.pipeline_config("scripted-chain")
    derived = host.pipeline_config("short-chain")
    assert derived.name == "short-chain" and base.name == "scripted-chain"
    thinker, talker, vocoder = derived.stages
    assert thinker.engine_args == {**base.stages[0].engine_args, "num_tokens": 7}  # max_n + 5
    assert talker.engine_args == {"num_tokens": 2}
    assert vocoder == base.stages[2]  # untouched stages are the base's
    assert derived.source == "<short-chain derived from scripted-chain>"
    # each load is a fresh copy: deriving never changes the registered base
    assert host.pipeline_config("scripted-chain").stages[1].engine_args == {"num_tokens": 6}


async def test_the_derived_pipeline_resolves_and_runs(host, make_engine):
    resolved = resolve_pipeline("short-chain", host)
    assert resolved.host is host and resolved.config.stages[1].engine_args["num_tokens"] == 2
    engine = make_engine("short-chain", settings=host.settings, plugins=host)
    outputs = [o async for o in engine.generate("hi", request_id="r1")]
    tokens = {"thinker": 0, "vocoder": 0}
    for out in outputs:
        tokens[out.stage_name] += len(out.token_ids)
    assert tokens == {"thinker": 7, "vocoder": 3}  # derived thinker (max_n + 5), base vocoder
    assert outputs[-1].finished


def test_derive_merges_mappings_and_stages_by_id_and_removes_on_none(host):
    base = host.pipeline_config("scripted-chain")
    derived = base.derive(
        {
            "name": "x",
            "stages": [
                {"id": 0, "restart": None},
                {
                    "id": 3,
                    "name": "extra",
                    "kind": "scripted",
                    "inputs": [2],
                    "final_output": True,
                },
            ],
        }
    )
    assert [s.id for s in derived.stages] == [0, 1, 2, 3]
    assert derived.stages[0].restart.policy == "no"  # removed: back to its default ("no")
    assert base.stages[0].restart.policy == "on-failure"
    assert derived.stages[3].name == "extra" and base.stages[1:] == derived.stages[1:3]
    with pytest.raises(ConfigError, match=r"<x derived from scripted-chain>: .*stage"):
        base.derive({"name": "x", "stages": [{"id": 1, "inputs": [9]}]})


def test_unknown_and_cyclic_derivations_are_one_clear_error(fake_entry_points, omni_settings):
    def loop_a(host):
        return host.pipeline_config("loop-b")

    def loop_b(host):
        return host.pipeline_config("loop-a")

    fake_entry_points.add(
        "loops",
        pipelines_plugin(PipelineSpec("loop-a", loop_a), PipelineSpec("loop-b", loop_b)),
    )
    host = PluginHost.create(omni_settings)
    with pytest.raises(ConfigError, match="derive in a cycle: loop-a -> loop-b -> loop-a"):
        host.pipeline_config("loop-a")
    with pytest.raises(ConfigError, match=r"pipeline 'nope' is not registered \(registered: .*"):
        host.pipeline_config("nope")


def test_a_factory_taking_no_argument_still_loads(host):
    spec = PipelineSpec("plain", lambda: PipelineConfig.from_dict({"name": "plain", "stages": []}))
    with pytest.raises(ConfigError):  # called without the host (and validated)
        spec.config(host)
