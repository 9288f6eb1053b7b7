"""Test directories that need an optional extra: skipped locally without it, a hard error in CI
(which sets the directory's ``OMNI_REQUIRE_*`` variable)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import pytest


def require_installed(module: str, env: str, directory: str, hint: str) -> Callable[..., None]:
    """A ``pytest_collection_modifyitems`` hook for a conftest of ``directory``."""

    def hook(config: Any, items: list[Any]) -> None:
        if importlib.util.find_spec(module) is not None:
            return
        if os.environ.get(env) == "1":
            raise pytest.UsageError(f"{env}=1 but {module} is not installed ({hint})")
        skip = pytest.mark.skip(reason=f"{module} not installed ({hint})")
        for item in items:
            if directory in str(item.fspath):
                item.add_marker(skip)

    return hook
