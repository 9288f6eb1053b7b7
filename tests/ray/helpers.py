"""Helpers of the Ray tests."""

from __future__ import annotations

import importlib
import os
from typing import Any

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
