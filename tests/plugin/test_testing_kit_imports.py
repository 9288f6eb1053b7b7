"""The testing kit the first-party plugins' tests import is public: each ``omni_core.testing``
module they use is in the manifest (``omni_core.public``), rendered in docs/api/testing.md."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing.public_api import public_api_violations

ROOT = Path(__file__).resolve().parents[2]
TESTS = sorted(ROOT.glob("plugins/*/tests")) + sorted(ROOT.glob("examples/*/tests"))


def test_plugin_tests_import_only_public_testing_kit_modules():
    assert len(TESTS) >= 4
    found = [
        f"{tests.parent.name}/tests/{violation}"
        for tests in TESTS
        for violation in public_api_violations(tests)
        if "omni_core.testing" in violation
    ]
    assert found == []
