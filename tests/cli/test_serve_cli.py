"""``omni serve``'s command line: its help shows the host/port defaults, and with no PIPELINE it
serves the same pipeline ``omni run`` runs (issue 41)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import types

import pytest

from omni_core import PLUGIN_API_VERSION, PipelineConfig, hookimpl
from omni_core.plugin import PipelineSpec


def test_serve_help_shows_the_host_and_port_defaults(run_cli, monkeypatch):
    code, out, _ = run_cli("serve", "--help")
    assert code == 0
    assert "Bind address (default 127.0.0.1; OMNI_HOST)" in out
    assert "Port (default 8000; OMNI_PORT)" in out
    monkeypatch.setenv("OMNI_PORT", "9123")  # the help says what this environment gets
    code, out, _ = run_cli("serve", "--help")
    assert "Port (default 9123; OMNI_PORT)" in out


def marked_default() -> types.ModuleType:
    module = types.ModuleType("fake_default")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    yaml = "name: favourite\nstages:\n  - {id: 0, name: a, kind: scripted, final_output: true}\n"

    @hookimpl
    def omni_register_pipelines():
        return [
            PipelineSpec("favourite", lambda: PipelineConfig.from_yaml_text(yaml), default=True)
        ]

    module.omni_register_pipelines = omni_register_pipelines
    return module


@pytest.mark.parametrize("marked", [False, True])
def test_serve_and_run_default_to_the_same_pipeline(
    run_cli, fake_entry_points, monkeypatch, marked
):
    import omni_core.serve.server as server

    if marked:
        fake_entry_points.add("fav", marked_default())
    served = []
    monkeypatch.setattr(server, "run_server", lambda config, **_: served.append(config.name))
    code, _, err = run_cli("serve")
    assert code == 0, err
    assert served == ["favourite" if marked else "tiny-omni"]


SLOW = """name: slow
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {start_delay_s: 2.5}, final_output: true}
"""


def test_serve_says_what_starts_until_it_serves(tmp_path):
    """On a pipe: a status line naming the stage that starts and the seconds, then the server's
    own 'serving' line, and no status line after it."""
    from tests.serve.conftest import free_port

    (tmp_path / "slow.yaml").write_text(SLOW)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    env["OMNI_TESTING_KIT"] = "1"  # the scripted kind
    port = free_port()
    args = ["serve", str(tmp_path / "slow.yaml"), "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_core.cli", *args],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    deadline = threading.Timer(60, proc.kill)  # a server that never says 'serving' ends the read
    deadline.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # bounded by the timeout below
            lines.append(line.rstrip("\n"))
            if "serving slow on http://" in line:
                break
    finally:
        deadline.cancel()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    serving = next((i for i, line in enumerate(lines) if "serving slow on http://" in line), None)
    assert serving is not None, lines
    status = [line for line in lines[:serving] if line.startswith("omni serve slow: ")]
    assert any(
        re.fullmatch(
            r"omni serve slow: stage 'a' \(id 0\) replica 0: starting \(scripted\) \(\d+s\)", s
        )
        for s in status
    ), lines
