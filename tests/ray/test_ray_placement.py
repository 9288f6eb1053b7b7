"""Placement arithmetic without a cluster: a replica's demand, why no node fits it, the bundles of
a pipeline's placement group, the options of an actor in its bundle, config conflicts."""

from __future__ import annotations

import pytest

from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig, StageResources
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError, StartupError
from omni_core.plugin.hooks import PluginHost
from omni_core.stage.ray_placement import PipelinePlacement, demand, missing_resource
from omni_core.stage.ray_runtime import actor_options, in_bundle

NODES = [
    {"CPU": 1.0, "memory": 1e9, "node:127.0.0.1": 1.0},
    {"CPU": 1.0, "thinker_node": 1.0, "GPU": 1.0},
]

GROUP = """
name: grouped
runtime: ray
placement_group: STRICT_SPREAD
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2,
     resources: {num_cpus: 0.5, num_gpus: 1, custom: {thinker_node: 1}}}
  - {id: 1, name: talker, kind: scripted, inputs: [0], final_output: true,
     resources: {node_ip: 10.0.0.2}}
"""


def resolved(text: str):
    host = PluginHost.create(OmniSettings(), load_entry_points=False)
    return resolve_pipeline(PipelineConfig.from_yaml_text(text, source="<p>"), host)


def test_demand_of_a_replica():
    assert demand(StageResources()) == {"CPU": 1.0}  # Ray's default to place an actor
    assert demand(StageResources(num_cpus=0, custom={"a": 2})) == {"a": 2.0}
    assert demand(StageResources(num_cpus=0.5, num_gpus=1, node_ip="10.0.0.2")) == {
        "CPU": 0.5,
        "GPU": 1.0,
        "node:10.0.0.2": 0.001,
    }


def test_missing_resource_names_what_no_node_has():
    assert missing_resource({"CPU": 1.0, "thinker_node": 1.0}, NODES) is None
    absent = missing_resource({"CPU": 0.1, "talker_node": 1.0}, NODES)
    assert absent == (
        "no alive node has resource 'talker_node' (the 2 alive node(s) declare: CPU, GPU, "
        "memory, thinker_node)"
    )
    assert missing_resource({"GPU": 2.0}, NODES) == (
        "no alive node has 2 of 'GPU' (at most 1 on one node)"
    )
    assert missing_resource({"GPU": 1.0, "node:127.0.0.1": 0.001}, NODES) == (
        "no single alive node has all of it at once"
    )
    assert "declare: nothing" in missing_resource({"CPU": 1.0}, [])


def test_a_pipelines_bundles_and_the_actor_options_in_them():
    pipeline = resolved(GROUP)
    plan = PipelinePlacement.plan(pipeline, "STRICT_SPREAD")
    assert plan.bundles == [
        {"CPU": 0.5, "GPU": 1.0, "thinker_node": 1.0},
        {"CPU": 0.5, "GPU": 1.0, "thinker_node": 1.0},
        {"CPU": 1.0, "node:10.0.0.2": 0.001},
    ]
    assert plan.index == {(0, 0): 0, (0, 1): 1, (1, 0): 2}
    assert plan.stages == ["thinker", "thinker", "talker"]
    talker = pipeline.stages[1].config.resources
    base = actor_options(talker, {"X": "1"})
    assert base["resources"] == {"node:10.0.0.2": 0.001} and "num_cpus" not in base
    plan.group = object()  # what reserve() sets: the strategy refers to it
    options = in_bundle(base, plan, 1, 0)
    assert options["num_cpus"] == 1.0 and options["num_gpus"] == 0.0  # the whole bundle
    assert options["resources"] == {"node:10.0.0.2": 0.001}
    assert options["runtime_env"] == {"env_vars": {"X": "1"}} and options["max_restarts"] == 0
    strategy = options["scheduling_strategy"]
    assert strategy.placement_group is plan.group and strategy.placement_group_bundle_index == 2


def test_a_bundle_needs_some_resource():
    text = GROUP.replace("resources: {node_ip: 10.0.0.2}", "resources: {num_cpus: 0}")
    with pytest.raises(StartupError) as err:
        PipelinePlacement.plan(resolved(text), "PACK")
    assert "stage 'talker': field 'resources': a replica's placement-group bundle needs a" in str(
        err.value
    )


def test_placement_group_and_a_stage_spread_conflict():
    text = GROUP.replace(
        "custom: {thinker_node: 1}}", "custom: {thinker_node: 1}, strategy: SPREAD}"
    )
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_yaml_text(text, source="p.yaml")
    assert str(err.value).count("\n") == 0
    assert (
        "p.yaml: stage 'thinker' (id 0): field 'resources.strategy': SPREAD places replicas one "
        "by one, but 'placement_group' places them all: use 'placement_group: SPREAD' instead"
    ) in str(err.value)
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_yaml_text(GROUP.replace("STRICT_SPREAD", "SCATTER"), source="p.yaml")
    assert "p.yaml: field 'placement_group'" in str(err.value)
