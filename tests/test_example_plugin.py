"""Runs the example plugin's own tests (examples/omni-example-plugin/tests) in this suite.

The example is not installed: its ``src`` directory goes on ``sys.path`` and its test module is
loaded from its file; its tests and fixtures are re-exported here for pytest to collect. The
testing kit's fixtures come from tests/conftest.py, as they do from the example's conftest.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "omni-example-plugin"

if str(EXAMPLE / "src") not in sys.path:
    sys.path.insert(0, str(EXAMPLE / "src"))

_spec = importlib.util.spec_from_file_location(
    "omni_example_plugin_tests", EXAMPLE / "tests" / "test_example_plugin.py"
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)

# its test functions and its fixture ``example``: pytest collects them by name from this module
_EXPORTED = ["example", *(name for name in dir(_module) if name.startswith("test_"))]
globals().update({name: getattr(_module, name) for name in _EXPORTED})
