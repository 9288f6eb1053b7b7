"""Loads test modules of a plugin distribution kept in this repository, for this suite.

Each module is loaded from its file under its own name; its tests and fixtures are re-exported
into the calling test module, where pytest collects them (see tests/test_cfg_plugin.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_tests(path: Path, name: str, fixtures: tuple[str, ...] = ()) -> dict[str, Any]:
    """The test functions (and named fixtures) of the test module at ``path``."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    names = [*fixtures, *(n for n in dir(module) if n.startswith("test_"))]
    return {n: getattr(module, n) for n in names}
