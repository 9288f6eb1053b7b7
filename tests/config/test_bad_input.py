"""Careless or hostile pipeline files: every one is a ConfigError naming the file, stage and field,
never a TypeError, RecursionError, hang or absurd allocation."""

from __future__ import annotations

import pytest

from omni_core.config.pipeline import MAX_FILE_BYTES, MAX_STAGES, PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError


def problems_of(text: str, host=None) -> list[str]:
    with pytest.raises(ConfigError) as err:
        config = PipelineConfig.from_yaml_text(text, source="p.yaml")
        if host is not None:
            resolve_pipeline(config, host)
    return err.value.problems


def one_stage(fields: str) -> str:
    return (
        f"name: x\nstages:\n  - {{id: 0, name: a, kind: scripted, final_output: true, {fields}}}\n"
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("inputs: 5", "p.yaml: stage 'a' (id 0): field 'inputs': Input should be a valid list"),
        (
            "inputs: {a: 1}",
            "p.yaml: stage 'a' (id 0): field 'inputs': Input should be a valid list",
        ),
        ("replicas: 1.0e+8", "p.yaml: stage 'a' (id 0): field 'replicas': Input should be less"),
        ("replicas: 0", "p.yaml: stage 'a' (id 0): field 'replicas': Input should be greater"),
        ("restart: {backoff_s: .inf}", "p.yaml: stage 'a' (id 0): field 'restart.backoff_s':"),
        ("resources: {num_gpus: .nan}", "p.yaml: stage 'a' (id 0): field 'resources.num_gpus':"),
        ("resources: {custom: {x: -1}}", "p.yaml: stage 'a' (id 0): field 'resources.custom.x':"),
        ("name2: b", "p.yaml: stage 'a' (id 0): field 'name2': unknown field"),
    ],
)
def test_bad_stage_field_is_one_line_naming_stage_and_field(fields, problem):
    problems = problems_of(one_stage(fields))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_unhashable_id_is_a_field_error_not_a_crash():
    problems = problems_of("""
name: x
stages:
  - {id: [0], name: a, kind: scripted, final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [[0], {stage: [0]}, 7]}
""")
    assert problems[0] == "p.yaml: stage 'a' (id [0]): field 'id': Input should be a valid integer"
    assert "p.yaml: stage 'b' (id 1): field 'inputs': unknown stage id 7" in problems


def test_stream_chunk_is_bounded():
    problems = problems_of("""
name: x
stages:
  - {id: 0, name: a, kind: scripted}
  - {id: 1, name: b, kind: scripted, final_output: true,
     inputs: [{stage: 0, mode: stream, chunk: 100000000}]}
""")
    assert problems == [
        "p.yaml: stage 'b' (id 1): field 'inputs.0.chunk': Input should be less than or equal to "
        "65536"
    ]


def test_empty_stage_name_is_rejected():
    (problem,) = problems_of(one_stage("").replace("name: a", "name: ''"))
    assert problem.startswith("p.yaml: stage '' (id 0): field 'name':")


def chain(n: int, back_edge: bool = False) -> dict:
    """Stages n-1 .. 0 listed last-first, each fed by the one before it (worst case for a
    recursive walk); ``back_edge`` closes the chain into a cycle."""
    stages = [
        {"id": i, "name": f"s{i}", "kind": "scripted", "inputs": [i - 1] if i else []}
        for i in reversed(range(n))
    ]
    stages[0]["final_output"] = True
    if back_edge:
        stages[-1]["inputs"] = [n - 1]
    return {"name": "chain", "stages": stages}


def test_longest_allowed_chain_validates_and_orders_without_recursion():
    config = PipelineConfig.from_dict(chain(MAX_STAGES))
    assert [s.id for s in config.topological_order()] == list(range(MAX_STAGES))
    assert config.final_stage_ids == [MAX_STAGES - 1]


def test_cycle_through_a_long_chain_is_reported_with_its_path():
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict(chain(MAX_STAGES, back_edge=True))
    (problem,) = err.value.problems
    path = [int(p) for p in problem.split("cycle ")[1].split(" -> ")]
    assert len(path) == MAX_STAGES + 1 and path[0] == path[-1]
    assert sorted(path[:-1]) == list(range(MAX_STAGES))


def test_too_many_stages_is_one_line():
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict(chain(MAX_STAGES + 1), source="p.yaml")
    assert err.value.problems == [
        f"p.yaml: field 'stages': List should have at most {MAX_STAGES} items after validation, "
        f"not {MAX_STAGES + 1}"
    ]


def test_topological_order_prefers_the_stage_listed_first():
    config = PipelineConfig.from_dict(
        {
            "name": "x",
            "stages": [
                {"id": 5, "name": "e", "kind": "k", "inputs": [3, 3], "final_output": True},
                {"id": 3, "name": "c", "kind": "k", "inputs": [9]},
                {"id": 9, "name": "i", "kind": "k"},
                {"id": 1, "name": "a", "kind": "k"},
                {"id": 2, "name": "b", "kind": "k", "inputs": [1]},
            ],
        }
    )
    assert [s.id for s in config.topological_order()] == [9, 3, 5, 1, 2]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\nstages: " + "[" * 5000 + "]" * 5000, "p.yaml: invalid YAML: nested too deeply"),
        ("name: x\nwhen: 2024-13-45\nstages: []", "p.yaml: invalid YAML value: month must be"),
        ("", "p.yaml: a pipeline must be a mapping with 'name' and 'stages'"),
        ("- name: x", "p.yaml: a pipeline must be a mapping with 'name' and 'stages'"),
    ],
)
def test_unusable_yaml_is_one_line(text, problem):
    problems = problems_of(text)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_non_utf8_file_names_the_byte(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"name: x\xff\nstages: []\n")
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_yaml(path)
    assert err.value.problems == [f"{path}: not UTF-8 text (byte 0xff at offset 7)"]


def test_oversized_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "p.yaml"
    with path.open("wb") as file:
        file.truncate(MAX_FILE_BYTES * 4)  # sparse: costs no disk
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_yaml(path)
    assert err.value.problems == [f"{path}: pipeline file is larger than {MAX_FILE_BYTES} bytes"]


def test_directory_is_not_readable_as_pipeline(tmp_path):
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_yaml(tmp_path)
    (problem,) = err.value.problems
    assert problem.startswith(f"{tmp_path}: cannot read pipeline file:")


def test_sampling_params_are_checked_with_the_registry(plugin_host):
    problems = problems_of(
        """
name: x
stages:
  - {id: 0, name: a, kind: nope, final_output: true, sampling_params: {bogus: 1}}
  - {id: 1, name: b, kind: scripted, inputs: [0], sampling_params: {temperature: -1}}
  - {id: 2, name: c, kind: scripted, inputs: [1], sampling_params: {max_tokens: 4, seed: 1}}
""",
        plugin_host,
    )
    assert len(problems) == 3, problems
    assert problems[0].startswith("p.yaml: stage 'a' (id 0): sampling_params")
    assert "bogus" in problems[0]
    assert problems[1].startswith("p.yaml: stage 'a' (id 0): field 'kind': unknown stage kind")
    assert problems[2].startswith("p.yaml: stage 'b' (id 1): sampling_params")
    assert "temperature" in problems[2]


def test_long_name_is_not_a_crash_and_is_shortened(plugin_host):
    with pytest.raises(ConfigError) as err:
        resolve_pipeline("a" * 5000, plugin_host)
    (problem,) = err.value.problems
    assert problem.startswith("a" * 117 + "...: not a pipeline file and not a registered pipeline")
