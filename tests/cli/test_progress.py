"""Progress while a person waits (issue 41): ``omni run``/``omni serve`` say which model builds
or stage starts and for how long; third-party noise is hidden unless ``--verbose``; no log line
lands in the middle of a streamed answer."""

from __future__ import annotations

import logging
import os
import re
import time
import types
import warnings
from pathlib import Path

import pytest
import typer

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.cli.progress import StartupStatus, held_logs, last_line
from omni_core.cli.quiet import quiet_third_party
from omni_core.plugin import CliGroup
from omni_core.progress import report
from tests.cli.helpers import omni

SLOW = """name: slow
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true,
     final_output_type: text}
  - {id: 1, name: talker, kind: scripted, inputs: [0],
     engine_args: {num_tokens: 2, start_delay_s: 2.5}, final_output: true,
     final_output_type: audio}
"""
KIT = {"OMNI_TESTING_KIT": "1"}  # the scripted kind: the testing kit's
STATUS = re.compile(r"^omni run slow: (.+) \((\d+)s\)$")


def test_a_slow_start_names_the_stage_starting_and_the_seconds(tmp_path):
    (tmp_path / "slow.yaml").write_text(SLOW)
    result = omni("run", str(tmp_path / "slow.yaml"), "-o", str(tmp_path / "out"), env=KIT)
    assert result.returncode == 0, result.stderr
    lines = [STATUS.match(line) for line in result.stderr.splitlines()]
    assert lines and all(lines), result.stderr  # only status lines on stderr
    steps = [m.group(1) for m in lines if m is not None]
    assert "stage 'talker' (id 1) replica 0: starting (scripted)" in steps, steps
    assert result.stdout.startswith("[thinker] ")  # the status never reaches stdout


def test_a_fast_start_prints_no_status_on_a_pipe(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"
    result = omni("run", str(example), "-o", str(tmp_path), env=KIT)
    assert result.returncode == 0 and result.stderr == ""


def test_the_status_line_shows_the_workers_last_log_line(tmp_path):
    log = tmp_path / "stage.log"
    log.write_text("INFO an earlier run's last line\n")  # stage logs are appended to
    status = StartupStatus("omni run x")
    with status:
        report("stage", "stage 't' replica 0", "loading in its worker process", log_path=log)
        assert "earlier run" not in status.line()
        with log.open("a") as file:
            file.write("INFO loading weights\n\x1b[32mINFO compiling graph 3/7\x1b[0m\n\n")
        text = status.line()
    assert re.fullmatch(
        r"omni run x: stage 't' replica 0: loading in its worker process \| "
        r"INFO compiling graph 3/7 \(\d+s\)",
        text,
    ), text
    assert last_line(tmp_path / "missing.log") == ""


def test_a_model_build_or_a_worker_process_is_said_at_once_on_a_pipe(capsys):
    for step, what, log in (
        ("model", "model toy", None),
        ("stage", "stage 't' replica 0", Path("/nonexistent.log")),
    ):
        with StartupStatus("omni run x") as status:
            status.quiet_s = 3600.0  # no waiting out the quiet period: the step itself counts
            report(step, what, "busy", log_path=log)
            for _ in range(200):  # a few ticks of the status thread
                if capsys.readouterr().err:
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"no status line for {what}")


def test_serves_status_ends_once_every_replica_started():
    with StartupStatus("omni serve x", until=2) as status:
        report("stage", "stage 'a' (id 0) replica 0", "starting")
        report("stage", "stage 'a' (id 0) replica 0", "started", done=True)
        assert not status._done.is_set()
        report("stage", "stage 'b' (id 1) replica 0", "started", done=True)
        assert status._done.wait(5)


def test_log_lines_emitted_while_an_answer_streams_come_after_it(capsys):
    root = logging.getLogger()
    handler = logging.StreamHandler()  # writes to capsys's stderr
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(), held_logs():
            warnings.simplefilter("always")
            # a logger of this test's own: earlier tests may have levelled or disabled the
            # watchdog's (the CLI's --log-level, dictConfig's disable_existing_loggers)
            logging.getLogger("tests.cli.held_logs_probe").warning("loop blocked")
            warnings.warn_explicit("odd thing", UserWarning, "lib.py", 3)
            assert capsys.readouterr().err == ""  # held while the answer streams
        err = capsys.readouterr().err
        assert err.startswith("loop blocked\nlib.py:3: UserWarning: odd thing"), err
        assert root.handlers[-1] is handler
    finally:
        root.removeHandler(handler)


def test_third_party_warnings_are_hidden_unless_verbose(monkeypatch):
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    with quiet_third_party(), warnings.catch_warnings(record=True) as caught:
        assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
        assert logging.getLogger("transformers").getEffectiveLevel() == logging.ERROR
        warnings.warn_explicit("noise", UserWarning, "x.py", 1, module="transformers.foo")
    assert caught == []
    assert "TRANSFORMERS_VERBOSITY" not in os.environ  # restored
    with quiet_third_party(enabled=False):
        assert "TRANSFORMERS_VERBOSITY" not in os.environ


def env_group() -> types.ModuleType:
    module = types.ModuleType("fake_env")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    app = typer.Typer()

    @app.command()
    def show() -> None:
        print(os.environ.get("TRANSFORMERS_VERBOSITY", "unset"))

    @hookimpl
    def omni_register_cli_groups():
        return [CliGroup("env", app)]

    module.omni_register_cli_groups = omni_register_cli_groups
    return module


@pytest.mark.parametrize(("args", "seen"), [((), "error"), (("--verbose",), "unset")])
def test_commands_and_the_stages_they_start_are_quiet_unless_verbose(
    run_cli, fake_entry_points, monkeypatch, args, seen
):
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    fake_entry_points.add("env", env_group())
    code, out, err = run_cli(*args, "env", "show")  # a stage process inherits this environment
    assert (code, out) == (0, f"{seen}\n"), err
