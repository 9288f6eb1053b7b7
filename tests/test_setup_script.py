"""``./setup.sh`` (what CI runs first) says what it does: one ``[k/N] what`` line per step, N
right, a failing step still stops the script with its status (``set -euo pipefail`` kept)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SETUP = Path(__file__).resolve().parents[1] / "setup.sh"


def _text() -> str:
    return SETUP.read_text()


def test_the_step_count_matches_the_steps():
    text = _text()
    (declared,) = re.findall(r"^STEPS=(\d+)$", text, re.M)
    steps = re.findall(r"^run \"([^\"]+)\" ", text, re.M)
    assert int(declared) == len(steps), steps
    assert "set -euo pipefail" in text
    # every install goes through a step (nothing silent left between them)
    bare = [ln for ln in text.splitlines() if ln.startswith(".venv/bin/pip")]
    assert not bare, bare


def test_steps_announce_themselves_and_a_failure_stops_the_script(tmp_path):
    text = _text()
    helpers = text[text.index("STEPS=") : text.index('run "virtual environment')]
    script = tmp_path / "s.sh"
    script.write_text(
        "set -euo pipefail\n"
        + helpers
        + 'run "first thing" true\nrun "broken thing" sh -c "exit 3"\necho not reached\n'
    )
    # a short tick: a stopped ticker's last `sleep` holds the pipe open until it ends
    env = {**os.environ, "OMNI_SETUP_TICK_S": "0.2"}
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=30, env=env
    )
    assert done.returncode == 3
    lines = done.stdout.splitlines()
    (steps,) = re.findall(r"^STEPS=(\d+)$", text, re.M)
    assert lines[0].startswith(f"[1/{steps}] first thing (at ")
    assert lines[1].startswith("      done in ")
    assert lines[2].startswith(f"[2/{steps}] broken thing")
    assert "not reached" not in done.stdout
