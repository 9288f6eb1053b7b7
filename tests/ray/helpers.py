"""Helpers of the Ray tests."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

OMNI = str(Path(sys.executable).parent / "omni")

# what joining a supervised local Ray puts in a driver's environment, and RAY_ADDRESS
RAY_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess driver: none of this process's Ray settings."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_VARS}
    env.update(extra)
    return env


def import_psutil() -> Any:
    """psutil, which Ray vendors (on sys.path once Ray is imported) when it is not installed."""
    import ray  # noqa: F401

    return importlib.import_module("psutil")


def omni_run(
    pipeline: str, out: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``omni run PIPELINE --seed 7 -o OUT ARGS``, in a clean environment unless ``env``."""
    return subprocess.run(
        [OMNI, "run", pipeline, "--seed", "7", "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=200,
        env=env or clean_env(OMNI_LOG_LEVEL="INFO"),
    )


def thinker_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[thinker]")]
