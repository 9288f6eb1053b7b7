"""Running the ``omni`` CLI as a user does: a subprocess, without the caller's OMNI_* settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"


def omni(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "omni_core.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
