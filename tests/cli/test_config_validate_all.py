"""``omni config validate`` lists every problem of every file in one run (issue 41: a file's
problems came over three fix-and-rerun rounds: fields, then structure, then kinds)."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"
# one problem of each phase: a field (replicas), the structure (an edge to no stage), the
# registered kinds (an unknown kind, engine_args, sampling_params)
BAD = """name: bad
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 0}, final_output: true,
     replicas: 0}
  - {id: 1, name: b, kind: nokind, inputs: [5]}
  - {id: 2, name: c, kind: scripted, inputs: [0], engine_args: {bogus: 1},
     sampling_params: {temperature: -1}}
"""
STRUCTURE_ONLY = """name: edges
stages:
  - {id: 0, name: a, kind: scripted, final_output: true}
  - {id: 1, name: b, kind: nokind, inputs: [7]}
"""


def test_every_problem_of_every_file_at_once(run_cli, plugin_host, tmp_path):
    kinds = ", ".join(sorted(plugin_host.stage_kinds()))
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "edges.yaml").write_text(STRUCTURE_ONLY)
    bad, edges = tmp_path / "bad.yaml", tmp_path / "edges.yaml"
    code, out, err = run_cli("config", "validate", str(bad), str(EXAMPLE), str(edges))
    assert code == 2
    assert out == f"{EXAMPLE}: ok (3 stages)\n"
    assert sorted(err.splitlines()) == sorted(
        [
            f"error: {bad}: stage 'a' (id 0): field 'replicas': Input should be greater than or "
            "equal to 1",
            f"error: {bad}: stage 'a' (id 0): field 'engine_args.num_tokens': Input should be "
            "greater than or equal to 1",
            f"error: {bad}: stage 'b' (id 1): field 'inputs': unknown stage id 5",
            f"error: {bad}: stage 'b' (id 1): field 'kind': unknown stage kind 'nokind' "
            f"(registered: {kinds})",
            f"error: {bad}: stage 'c' (id 2): field 'engine_args.bogus': unknown field",
            f"error: {bad}: stage 'c' (id 2): sampling_params.temperature: expected `float` >= "
            "0.0 (value: -1)",
            f"error: {edges}: stage 'b' (id 1): field 'inputs': unknown stage id 7",
            f"error: {edges}: stage 'b' (id 1): field 'kind': unknown stage kind 'nokind' "
            f"(registered: {kinds})",
        ]
    )


def test_a_file_that_only_fails_its_kinds_is_reported_once(run_cli, plugin_host, tmp_path):
    kinds = ", ".join(sorted(plugin_host.stage_kinds()))
    file = tmp_path / "k.yaml"
    file.write_text(STRUCTURE_ONLY.replace("inputs: [7]", "inputs: [0]"))
    code, _, err = run_cli("config", "validate", str(file))
    assert code == 2
    assert err.splitlines() == [
        f"error: {file}: stage 'b' (id 1): field 'kind': unknown stage kind 'nokind' "
        f"(registered: {kinds})"
    ]
