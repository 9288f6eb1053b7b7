"""Plugins' flags of ``omni run PIPELINE`` (``omni_register_run_options``): accepted only on the
pipelines their plugin takes part in, mapped onto the request's ``params.extra``, listed by
``omni run PIPELINE --help``; an unknown flag, a bad value and conflicts are exit 2 naming them."""

from __future__ import annotations

import json
import sys
import types

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.cli import main
from omni_core.errors import PluginError
from omni_core.plugin.types import RunOption

THIS = sys.modules[__name__].__name__


def echo(prompt, params):
    """The stage: answers with the request's extra (what the flags set)."""
    return json.dumps(params.extra, sort_keys=True)


PIPELINE = f"""
name: echoed
stages:
  - {{id: 0, name: echo, kind: python, engine_args: {{callable: "{THIS}:echo"}},
     final_output: true, final_output_type: text}}
"""


def plugin(name, *options, applies=True):
    module = types.ModuleType(f"run_options_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_run_options():
        return list(options)

    @hookimpl
    def omni_applies_to(pipeline):
        return applies

    module.omni_register_run_options = omni_register_run_options
    module.omni_applies_to = omni_applies_to
    return module


SHOUT = RunOption(
    "shout",
    lambda value: {"echo": {"volume": value, "on": True}},
    help="How loud.",
    parse=int,
    metavar="N",
)
TONE = RunOption("tone", lambda value: {"echo": {"tone": value}}, help="Which tone.")


@pytest.fixture
def cli(omni_settings, fake_entry_points, capsys, tmp_path):
    """``cli(*args)`` -> (exit code, stdout, stderr) of ``omni run <the echo pipeline> ...``."""
    path = tmp_path / "echoed.yaml"
    path.write_text(PIPELINE)

    def run(*args: str, pipeline: str | None = str(path)) -> tuple[int, str, str]:
        code = main(["run", *([pipeline, "--raw"] if pipeline else []), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def answer(out: str) -> dict:
    line = next(line for line in out.splitlines() if line.startswith("[echo] "))
    return json.loads(line.removeprefix("[echo] "))


def test_a_plugins_flags_set_the_requests_extra(cli, fake_entry_points):
    fake_entry_points.add("loud", plugin("loud", SHOUT, TONE))
    code, out, err = cli("--shout", "3", "--tone=low", "--extra", "echo.more=1")
    assert code == 0, err
    assert answer(out) == {"echo": {"volume": 3, "on": True, "tone": "low", "more": 1}}
    code, out, err = cli("--prompt", "x")
    assert code == 0 and answer(out) == {}


def test_unknown_flags_and_bad_values_exit_2_naming_them(cli, fake_entry_points):
    fake_entry_points.add("loud", plugin("loud", SHOUT, TONE))
    code, out, err = cli("--whisper", "1")
    assert code == 2 and out == ""
    assert "--whisper: no such option of omni run for pipeline 'echoed'" in err
    assert "its plugins' options: --shout, --tone" in err
    code, _, err = cli("--shout", "loud")
    assert code == 2 and "--shout loud: invalid literal for int()" in err
    code, _, err = cli("--shout")
    assert code == 2 and "--shout: expects a value (N)" in err
    code, _, err = cli("--tone", "a", "--tone", "b")
    assert code == 2 and "--tone: given twice" in err
    code, _, err = cli("stray")
    assert code == 2 and "stray: unexpected argument" in err


def test_flags_only_on_the_pipelines_their_plugin_takes_part_in(cli, fake_entry_points):
    fake_entry_points.add("loud", plugin("loud", SHOUT, applies=False))
    code, _, err = cli("--shout", "3")
    assert code == 2 and "--shout: no such option" in err and "options: none" in err


def test_two_flags_setting_one_field_differently_exit_2_naming_both(cli, fake_entry_points):
    low = RunOption("low", lambda value: {"echo": {"tone": "low"}}, parse=str)
    fake_entry_points.add("loud", plugin("loud", TONE, low))
    code, _, err = cli("--tone", "high", "--low", "x")
    assert code == 2 and "--low and --tone set extra field 'echo.tone'" in err
    code, out, err = cli("--tone", "low", "--low", "x")  # the same value: no conflict
    assert code == 0 and answer(out) == {"echo": {"tone": "low"}}


def test_a_flag_of_two_plugins_or_of_omni_run_is_a_conflict_naming_both(cli, fake_entry_points):
    fake_entry_points.add("loud", plugin("loud", SHOUT))
    fake_entry_points.add("louder", plugin("louder", SHOUT))
    code, _, err = cli("--prompt", "x")
    assert code == 2
    assert "RunOption 'shout' is provided by two plugins: " in err
    assert "'loud'" in err and "'louder'" in err


def test_a_flag_named_like_omni_runs_own_is_a_conflict(cli, fake_entry_points):
    fake_entry_points.add("seedy", plugin("seedy", RunOption("seed", lambda v: {"s": v})))
    code, _, err = cli("--prompt", "x")
    assert code == 2
    assert "RunOption '--seed' is provided by plugin 'seedy' and is one of omni run's own" in err


def test_a_to_extra_returning_no_mapping_names_the_plugin(cli, fake_entry_points):
    fake_entry_points.add("odd", plugin("odd", RunOption("odd", lambda v: [v])))
    code, _, err = cli("--odd", "1")
    assert code == 2 and "plugin 'odd': option --odd's to_extra returned list" in err


def test_help_lists_the_pipelines_plugin_options(cli, fake_entry_points):
    fake_entry_points.add("loud", plugin("loud", SHOUT, TONE))
    code, out, _ = cli("--help")
    assert code == 0 and "--prompt" in out
    assert "Options of pipeline 'echoed' (from its plugins):" in out
    assert "  --shout N    How loud. [loud]\n  --tone TEXT  Which tone. [loud]" in out
    code, out, _ = cli("--help", pipeline=None)  # no PIPELINE: how to see them
    assert code == 0 and "omni run PIPELINE --help also lists" in out and "--shout" not in out


def test_an_invalid_flag_name_is_refused():
    for bad in ("--seed", "Seed", "neg prompt", "a_b", ""):
        with pytest.raises(PluginError, match="run option name"):
            RunOption(bad, dict)
