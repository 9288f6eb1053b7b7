"""The ``omni`` CLI, run as a user runs it (a subprocess)."""

from __future__ import annotations

import pytest

from tests.cli.helpers import EXAMPLE, omni


def test_run_streams_text_and_prints_timing_table():
    result = omni("run", str(EXAMPLE), "--prompt", "hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[thinker] thinker:")
    assert "[vocoder] audio: 3 outputs, 3 tokens" in result.stdout
    assert "per-stage timing" in result.stdout
    for stage in ("thinker", "talker", "vocoder"):
        assert stage in result.stdout.split("per-stage timing")[1]
    assert "finish_reason: stop" in result.stdout


def test_run_by_registered_name_with_max_tokens():
    result = omni("run", "scripted-chain", "--prompt", "hello", "--max-tokens", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("thinker:") == 2
    assert "finish_reason: length" in result.stdout


BAD = """name: bad
stages:
  - {id: 0, name: thinker, kind: scripted, final_output: true, final_outptu_type: text}
  - {id: 1, name: talker, kind: scripted, inputs: [7]}
"""


def test_validate_bad_config_exits_2_one_line_per_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    for command in (["config", "validate", str(path)], ["run", str(path), "--prompt", "x"]):
        result = omni(*command)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"error: {path}: stage 'thinker' (id 0): field 'final_outptu_type': unknown field",
            f"error: {path}: stage 'talker' (id 1): field 'inputs': unknown stage id 7",
        ]
        assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = omni("--debug", "config", "validate", str(path))
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_validate_good_config():
    result = omni("config", "validate", str(EXAMPLE))
    assert result.returncode == 0 and "ok (3 stages)" in result.stdout


def test_plugins_list_and_stages():
    result = omni("plugins", "list", env={"OMNI_DISABLE_PLUGINS": "nothing-here"})
    assert result.returncode == 0
    assert "builtin" in result.stdout and "omni_register_stage_kinds" in result.stdout
    assert "disabled by OMNI_DISABLE_PLUGINS" in result.stdout
    stages = omni("stages")
    assert "python" in stages.stdout and "scripted" in stages.stdout


def test_unknown_pipeline_is_bad_input():
    result = omni("run", "no-such-pipeline", "--prompt", "x")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: no-such-pipeline: not a pipeline file")


def test_chaos_small_run_is_clean():
    result = omni("bench", "chaos", "--requests", "200", "--concurrency", "50")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "terminals/request   {1: 200}" in result.stdout


@pytest.mark.slow
def test_run_sends_the_prompt_as_a_chat_unless_raw():
    def thinker_text(*args: str) -> str:
        result = omni("run", "scripted-chain", "--prompt", "hello", *args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("\n")[0]

    chat, raw = thinker_text(), thinker_text("--raw")
    assert chat == raw  # one user message renders to its text on a kind without a template
    assert thinker_text("--system", "be brief") != chat  # the system message is in the prompt
    bad = omni("run", "scripted-chain", "--raw", "--system", "x")
    assert bad.returncode == 2 and "--system needs the chat template" in bad.stderr
