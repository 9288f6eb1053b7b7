"""The test tiers (tests/optional.py): markers by fixture and by path, ``-m`` selecting on them, a
missing extra skipping its tests unless its OMNI_REQUIRE_* variable makes that an error, and a
deselected directory not even imported. Run in-process by pytester on a throwaway suite whose
"extras" are a module that exists (``json``) and one that does not."""

from __future__ import annotations

import pytest

from tests import optional

pytest_plugins = ["pytester"]

SUITE = {
    "conftest.py": """
import pytest

@pytest.fixture
def real_model():
    return 1
""",
    "test_core.py": """
def test_logic():
    pass

def test_uses_model(real_model):
    pass
""",
    "test_cluster.py": """
def test_cluster():
    pass
""",
    "heavy/test_heavy.py": """
raise RuntimeError("imported although its directory was deselected")

def test_never():
    pass
""",
}


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setattr(
        optional,
        "TIERS",
        {
            "engine": optional.Tier("real engine", "json", "OMNI_T_REQUIRE_ENGINE", "have json"),
            "ray": optional.Tier("Ray", "omni_no_such_extra", "OMNI_T_REQUIRE_RAY", "install it"),
        },
    )
    monkeypatch.setattr(optional, "BY_FIXTURE", {"real_model": "engine"})
    monkeypatch.setattr(
        optional, "BY_PATH", {"heavy/": "engine", "test_cluster.py::test_clus": "ray"}
    )
    monkeypatch.delenv("OMNI_T_REQUIRE_RAY", raising=False)
    for path, text in SUITE.items():
        (pytester.path / path).parent.mkdir(exist_ok=True)
        (pytester.path / path).write_text(text)
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    plain = ("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:hypothesispytest")
    return suite.runpytest_inprocess("-p", "tests.optional", *plain, *args)


def test_the_fast_tier_leaves_out_marked_tests_and_never_imports_a_marked_directory(suite):
    result = run(suite, "-m", "not engine and not ray", "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_core.py::test_logic PASSED*"])


def test_markers_come_from_fixtures_and_paths_and_a_missing_extra_skips(suite):
    result = run(suite, "-m", "engine or ray", "--ignore=heavy", "-rs")
    result.assert_outcomes(passed=1, skipped=1, deselected=1)  # engine's json is installed
    result.stdout.fnmatch_lines(["*test_cluster.py*omni_no_such_extra not installed (install it)*"])


def test_a_required_missing_extra_is_an_error_naming_its_variable(suite, monkeypatch):
    monkeypatch.setenv("OMNI_T_REQUIRE_RAY", "1")
    result = run(suite, "--ignore=heavy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*OMNI_T_REQUIRE_RAY=1 but omni_no_such_extra is not installed (install it)*"]
    )
    # deselected, they need not run
    run(suite, "--ignore=heavy", "-m", "not ray").assert_outcomes(passed=2, deselected=1)


def test_the_real_markers_are_registered():
    assert set(optional.TIERS) == {"engine", "ray"}
    assert {optional.TIERS[m].env for m in optional.TIERS} == {
        "OMNI_REQUIRE_VLLM",
        "OMNI_REQUIRE_RAY",
    }
