"""Every bad CLI input exits 2 with one ``error:`` line naming what was wrong: no traceback, no
usage block, no hang (each run is bounded by a timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import EXAMPLE, omni


def bad_input(*args: str, env: dict | None = None, timeout: float = 60) -> str:
    """Run ``omni ARGS``; assert exit 2 and one error line; return that line."""
    result = omni(*args, env=env, timeout=timeout)
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def one_stage(fields: str) -> str:
    return (
        f"name: x\nstages:\n  - {{id: 0, name: a, kind: scripted, final_output: true, {fields}}}\n"
    )


PIPELINE_FILES = {
    "inputs-int": (one_stage("inputs: 5"), "stage 'a' (id 0): field 'inputs':"),
    "id-list": (
        one_stage("inputs: []").replace("id: 0", "id: [0]"),
        "stage 'a' (id [0]): field 'id':",
    ),
    "replicas": (one_stage("replicas: 1.0e+8"), "stage 'a' (id 0): field 'replicas':"),
    "sampling-unknown": (
        one_stage("sampling_params: {bogus: 1}"),
        "stage 'a' (id 0): sampling_params",
    ),
    "sampling-range": (
        one_stage("sampling_params: {temperature: -1}"),
        "stage 'a' (id 0): sampling_params",
    ),
    "nested": ("name: x\nstages: " + "[" * 5000 + "]" * 5000, "invalid YAML: nested too deeply"),
    "list": ("- 1\n", "a pipeline must be a mapping"),
    "empty": ("", "a pipeline must be a mapping"),
    "non-utf8": (b"name: \xff\nstages: []\n", "not UTF-8 text (byte 0xff at offset 6)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", sorted(PIPELINE_FILES))
def test_bad_pipeline_file_exits_2_naming_file_and_field(tmp_path, case, command):
    content, fragment = PIPELINE_FILES[case]
    path = tmp_path / "p.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    args = ["config", "validate", str(path)] if command == "validate" else ["run", str(path)]
    line = bad_input(*args)
    assert line.startswith(f"error: {path}") and fragment in line, line


def test_directory_and_missing_file_are_bad_input(tmp_path):
    line = bad_input("config", "validate", str(tmp_path))
    assert line.startswith(f"error: {tmp_path}: cannot read pipeline file:")
    line = bad_input("run", str(tmp_path / "gone.yaml"))
    assert line.startswith(f"error: {tmp_path / 'gone.yaml'}: cannot read pipeline file:")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_file_is_refused_not_read_forever():
    assert "larger than" in bad_input("config", "validate", "/dev/zero", timeout=30)


def test_name_too_long_for_a_path_is_an_unknown_pipeline():
    line = bad_input("run", "a" * 5000)
    assert "...: not a pipeline file and not a registered pipeline" in line
    assert len(line) < 500


def test_long_chain_within_bounds_validates(tmp_path):
    n = 1024  # deeper than Python's recursion limit; listed last-first
    lines = ["name: chain", "stages:"]
    for i in reversed(range(n)):
        inputs = f", inputs: [{i - 1}]" if i else ""
        final = ", final_output: true" if i == n - 1 else ""
        lines.append(f"  - {{id: {i}, name: s{i}, kind: scripted{inputs}{final}}}")
    path = tmp_path / "chain.yaml"
    path.write_text("\n".join(lines))
    result = omni("config", "validate", str(path))
    assert result.returncode == 0 and f"ok ({n} stages)" in result.stdout, result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--log-level", "bogus", "stages"], "Invalid value for '--log-level': 'bogus'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["models", "build", "nosuch"], "unknown model(s) ['nosuch']"),
        (["bench", "chaos", "--concurrency", "0"], "chaos: concurrency must be in 1..65536"),
        (["bench", "chaos", "--requests", "-1"], "chaos: requests must be in 1.."),
        (["bench", "nosuch"], "unknown benchmark(s) ['nosuch']"),
        (["serve", "--max-inflight", "0"], "Invalid value for '--max-inflight'"),
        (["serve", "--max-inflight", "-1"], "Invalid value for '--max-inflight'"),
        (["serve", "--port", "99999"], "Invalid value for '--port'"),
        (["serve", "--port", "0"], "Invalid value for '--port'"),
        (["run", str(EXAMPLE), "--runtime", "bogus"], "Invalid value for '--runtime'"),
        (["run", str(EXAMPLE), "--max-tokens", "0"], "Invalid value for '--max-tokens'"),
        (["run", str(EXAMPLE), "--temperature", "nan"], "Invalid value for '--temperature'"),
        (["run", str(EXAMPLE), "-o", str(EXAMPLE)], "Invalid value for '--output-dir'"),
        (["config", "validate"], "Missing argument 'files'"),
    ],
)
@pytest.mark.slow
def test_bad_option_exits_2_with_one_line(args, fragment):
    # serve would start a server if its options were accepted: a short timeout catches that
    assert fragment in bad_input(*args, timeout=30)


def test_usage_error_names_the_command_and_its_help():
    line = bad_input("serve", "--port", "99999")
    assert line.startswith("error: omni serve: ") and line.endswith("(see 'omni serve --help')")


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"OMNI_LOG_LEVEL": "bogus"}, "error: OMNI_LOG_LEVEL: unknown log level 'bogus'"),
        ({"OMNI_MAX_INFLIGHT": "0"}, "error: OMNI_MAX_INFLIGHT: "),
        ({"OMNI_STARTUP_TIMEOUT_S": "soon"}, "error: OMNI_STARTUP_TIMEOUT_S: "),
    ],
)
def test_bad_environment_setting_exits_2_naming_the_variable(env, fragment):
    assert bad_input("stages", env=env).startswith(fragment)


def test_log_level_is_case_insensitive():
    result = omni("--log-level", "info", "stages")
    assert result.returncode == 0 and "scripted" in result.stdout, result.stderr


def test_bare_group_still_shows_its_help():
    result = omni("config")
    assert result.returncode == 2 and "validate" in result.stderr + result.stdout


def test_config_validate_does_not_import_a_bridge_module(tmp_path):
    """A config's dotted-path bridge is located, not imported: its import side effect (a marker
    file) does not happen at validation; an unregistered bridge name is bad input."""
    marker = tmp_path / "imported"
    (tmp_path / "sfx_bridge.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "def make(sources, prompt, params):\n    return 'x'\n"
    )
    path = tmp_path / "p.yaml"
    chain = "name: x\nstages:\n  - {id: 0, name: a, kind: scripted}\n"
    path.write_text(
        chain + "  - {id: 1, name: b, kind: scripted, inputs: [0], final_output: true,"
        " bridge: 'sfx_bridge:make'}\n"
    )
    result = omni("config", "validate", str(path), env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "ok (2 stages)" in result.stdout
    assert not marker.exists()
    path.write_text(path.read_text().replace("sfx_bridge:make", "sfx_bridge_nope"))
    line = bad_input("config", "validate", str(path), env={"PYTHONPATH": str(tmp_path)})
    assert "stage 'b' (id 1): field 'bridge': unknown bridge 'sfx_bridge_nope'" in line
    assert not marker.exists()
