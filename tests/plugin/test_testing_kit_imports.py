"""The testing kit the first-party plugins' tests import is public: each ``omni_core.testing``
module they use is in the manifest (``omni_core.public``), rendered in docs/api/testing.md."""

from __future__ import annotations

from pathlib import Path

from omni_core.testing.public_api import public_api_violations

ROOT = Path(__file__).resolve().parents[2]
TESTS = sorted(ROOT.glob("plugins/*/tests")) + sorted(ROOT.glob("examples/*/tests"))


def test_plugin_tests_import_only_public_testing_kit_modules(tmp_path: Path):
    assert len(TESTS) >= 4
    users = [
        f for tests in TESTS for f in tests.glob("*.py") if "omni_core.testing" in f.read_text()
    ]
    assert users  # the serve tests of the speech plugins, at least
    for source in users:  # only those files go through the (whole-tree) check
        copy = tmp_path / source.parent.parent.name / source.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(source.read_text())
    found = [v for v in public_api_violations(tmp_path) if "omni_core.testing" in v]
    assert found == []
