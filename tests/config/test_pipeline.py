"""Pipeline config: parsing, structural validation and registry checks, readable errors."""

from __future__ import annotations

import pytest

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError


def problems_of(text: str, host=None) -> list[str]:
    with pytest.raises(ConfigError) as err:
        config = PipelineConfig.from_yaml_text(text, source="p.yaml")
        if host is not None:
            resolve_pipeline(config, host)
    return err.value.problems


def test_inputs_accept_ids_and_edge_mappings():
    config = PipelineConfig.from_yaml_text(
        """
name: x
stages:
  - {id: 0, name: a, kind: scripted}
  - {id: 1, name: b, kind: scripted, inputs: [0, {stage: 0, mode: stream, chunk: 8}]}
  - {id: 2, name: c, kind: scripted, inputs: [{stage: 1}], final_output: true}
""".replace("[0, {stage: 0, mode: stream, chunk: 8}]", "[{stage: 0, mode: stream, chunk: 8}]")
    )
    edge = config.stage(1).inputs[0]
    assert (edge.stage, edge.mode, edge.chunk) == (0, "stream", 8)
    assert config.stage(2).inputs[0].mode == "on_finish"
    assert config.final_stage_ids == [2]


def test_misspelled_field_and_unknown_input_are_both_reported():
    problems = problems_of("""
name: x
stages:
  - {id: 0, name: a, kind: scripted, final_output: true, final_outptu_type: text}
  - {id: 1, name: b, kind: scripted, inputs: [7]}
""")
    assert problems == [
        "p.yaml: stage 'a' (id 0): field 'final_outptu_type': unknown field",
        "p.yaml: stage 'b' (id 1): field 'inputs': unknown stage id 7",
    ]


def test_cycle_is_reported_with_its_path():
    problems = problems_of("""
name: x
stages:
  - {id: 0, name: a, kind: scripted, inputs: [1], final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [0]}
""")
    assert len(problems) == 1 and "cycle" in problems[0] and "field 'inputs'" in problems[0]


def test_no_final_stage_duplicate_ids_and_stream_fan_in():
    problems = problems_of("""
name: x
stages:
  - {id: 0, name: a, kind: scripted}
  - {id: 0, name: b, kind: scripted}
  - {id: 2, name: c, kind: scripted, inputs: [{stage: 0, mode: stream}, 1]}
""")
    text = "\n".join(problems)
    assert "field 'id': duplicate stage id" in text
    assert "no stage has final_output: true" in text
    assert "'stream' edge must be the stage's only input" in text


def test_invalid_yaml_names_file_and_line():
    problems = problems_of("name: x\nstages: [\n  {id: 0,\n")
    assert problems[0].startswith("p.yaml:") and "invalid YAML" in problems[0]


def test_registry_checks_name_stage_and_field(plugin_host):
    problems = problems_of(
        """
name: x
engine: warp
requires_plugins: [omni-nonexistent]
extra_section: {a: 1}
stages:
  - {id: 0, name: a, kind: nope, final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 0, bogus: 1}}
  - {id: 2, name: c, kind: scripted, inputs: [1], bridge: no_such_bridge}
""",
        plugin_host,
    )
    assert (
        "p.yaml: field 'requires_plugins': plugin 'omni-nonexistent' is not installed or "
        "disabled" in problems
    )
    assert any("field 'engine': unknown engine kind 'warp'" in p for p in problems)
    assert "p.yaml: field 'extra_section': unknown field" in problems
    assert any(
        p.startswith("p.yaml: stage 'a' (id 0): field 'kind': unknown stage kind 'nope'")
        for p in problems
    )
    assert any(
        p.startswith("p.yaml: stage 'b' (id 1): field 'engine_args.num_tokens':") for p in problems
    )
    assert "p.yaml: stage 'b' (id 1): field 'engine_args.bogus': unknown field" in problems
    assert any(
        p.startswith("p.yaml: stage 'c' (id 2): field 'bridge': unknown bridge") for p in problems
    )


def test_bridge_by_dotted_path_and_registered_name(plugin_host):
    config = PipelineConfig.from_yaml_text("""
name: x
stages:
  - {id: 0, name: a, kind: scripted}
  - {id: 1, name: b, kind: scripted, inputs: [0], bridge: text}
  - {id: 2, name: c, kind: scripted, inputs: [1], bridge: "omni_core.stage.bridges:default_bridge",
     final_output: true}
""")
    resolved = resolve_pipeline(config, plugin_host)
    from omni_core.stage.bridges import default_bridge, text_bridge

    assert resolved.stages[1].bridge is text_bridge
    assert resolved.stages[2].bridge is default_bridge


def test_named_pipeline_and_unknown_name(plugin_host):
    assert resolve_pipeline("scripted-chain", plugin_host).config.name == "scripted-chain"
    with pytest.raises(ConfigError, match="not a registered pipeline.*scripted-chain"):
        resolve_pipeline("nope", plugin_host)


def test_python_built_config_validates_like_yaml():
    with pytest.raises(ConfigError, match="field 'name': required field is missing"):
        PipelineConfig.from_dict({"stages": [{"id": 0, "kind": "scripted", "final_output": True}]})
