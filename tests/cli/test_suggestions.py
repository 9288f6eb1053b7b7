"""Errors that suggest the fix (issue 41): a typo of an option or a pipeline name names the
closest match, a global option after the command says where it goes; each is exit 2 with one
``error:`` line and no traceback."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin import RunOption

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"


def one_error(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 2, out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and out == ""
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--promt", "hi"],  # before PIPELINE: was "--promt: not a pipeline file"
        ["run", "tiny-omni", "--promt", "hi"],  # was a talk about plugins' options
        ["run", str(EXAMPLE), "--promt=hi"],
    ],
)
def test_a_typo_of_a_run_option_suggests_the_option(run_cli, args):
    line = one_error(run_cli(*args))
    assert "No such option: --promt. Did you mean --prompt?" in line, line


def test_a_typo_of_a_run_option_is_refused_before_the_pipeline_loads(run_cli):
    line = one_error(run_cli("run", "no-such-pipeline", "--max-token", "3"))
    assert "No such option: --max-token. Did you mean --max-tokens?" in line


@pytest.mark.parametrize("flag", ["--debug", "--verbose", "--trace-hooks"])
def test_a_global_option_after_the_command_is_refused_plainly(run_cli, flag):
    line = one_error(run_cli("run", "tiny-omni", flag))  # --debug printed a traceback before
    assert (
        f"No such option: {flag} (a global option: put it before the command: omni {flag} run"
        in line
    )
    line = one_error(run_cli("stages", flag))
    assert f"No such option: {flag} (a global option" in line and f"omni {flag} stages" in line


def test_debug_before_the_command_still_works(run_cli, tmp_path):
    code, _, err = run_cli("--debug", "run", str(EXAMPLE), "-o", str(tmp_path), "--max-tokens", "2")
    assert code == 0, err


def test_an_unknown_pipeline_name_suggests_the_closest(run_cli):
    line = one_error(run_cli("run", "tiny-omn"))
    assert "tiny-omn: not a pipeline file and not a registered pipeline" in line
    assert line.endswith("Did you mean tiny-omni or tiny-omni-duplex?") or line.endswith(
        "Did you mean tiny-omni?"
    ), line
    line = one_error(run_cli("run", "zzzzzz"))
    assert "Did you mean" not in line  # nothing close: no guess


def cfg_like_plugin() -> types.ModuleType:
    module = types.ModuleType("fake_guide")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_run_options():
        return [RunOption("negative-prompt", help="what to avoid", to_extra=lambda v: {"n": v})]

    module.omni_register_run_options = omni_register_run_options
    return module


def test_a_typo_of_a_plugins_option_suggests_it(run_cli, fake_entry_points):
    fake_entry_points.add("guide", cfg_like_plugin())
    line = one_error(run_cli("run", str(EXAMPLE), "--negative-promt", "x"))
    assert "--negative-promt: no such option of omni run for pipeline 'scripted-chain'. " in line
    assert "Did you mean --negative-prompt?" in line
    # the plugin's own option is still taken, its value whatever it looks like
    code, _, err = run_cli(
        "run", str(EXAMPLE), "--negative-prompt", "--prompt", "--max-tokens", "1"
    )
    assert code == 0, err
