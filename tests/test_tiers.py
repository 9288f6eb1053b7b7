"""The test tiers (tests/optional.py): markers by fixture and by path, ``-m`` selecting on them, a
missing extra skipping its tests unless its OMNI_REQUIRE_* variable makes that an error, and a
deselected directory not even imported. Run in-process by pytester on a throwaway suite whose
"extras" are a module that exists (``json``) and one that does not."""

from __future__ import annotations

import json

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
    assert set(optional.TIERS) == {"engine", "ray", "browser", "slow"}
    assert {optional.TIERS[m].env for m in ("engine", "ray", "browser")} == {
        "OMNI_REQUIRE_VLLM",
        "OMNI_REQUIRE_RAY",
        "OMNI_REQUIRE_BROWSER",
    }
    assert optional.TIERS["browser"].binary == "chromium"
    assert optional.TIERS["slow"].module is None  # no extra: never skipped, never required
    assert optional.FAST == "not engine and not ray and not slow"


PROPS = """
import json
from pathlib import Path

from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

CALLS = {"given": 0, "machine": 0}


@settings(max_examples=40, database=None)
@given(st.integers())
def test_a_property(x):
    CALLS["given"] += 1


class Machine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        CALLS["machine"] += 1

    @rule()
    def step(self):
        pass


Machine.TestCase.settings = settings(max_examples=30, stateful_step_count=2, database=None)
TestMachine = Machine.TestCase


def test_zz_counts():
    Path("calls.json").write_text(json.dumps(CALLS))
"""


@pytest.fixture
def props(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv(optional.MAX_EXAMPLES_ENV, raising=False)
    pytester.makepyfile(test_props=PROPS)
    return pytester


def calls(props: pytest.Pytester, *args: str) -> dict[str, int]:
    run(props, *args).assert_outcomes(passed=3)
    return json.loads((props.path / "calls.json").read_text())


def test_the_fast_tier_caps_hypothesis_examples_and_the_full_suite_keeps_its_counts(props):
    cap = optional.FAST_EXAMPLES
    assert calls(props) == {"given": 40, "machine": 30}
    assert calls(props, "-m", "not engine and not ray") == {"given": cap, "machine": cap}
    assert calls(props, "-m", optional.FAST) == {"given": cap, "machine": cap}
    assert calls(props, "-m", "not ray") == {"given": 40, "machine": 30}


def test_the_examples_cap_variable_applies_to_any_run_and_zero_lifts_it(props, monkeypatch):
    monkeypatch.setenv(optional.MAX_EXAMPLES_ENV, "3")
    assert calls(props) == {"given": 3, "machine": 3}
    monkeypatch.setenv(optional.MAX_EXAMPLES_ENV, "0")
    assert calls(props, "-m", optional.FAST) == {"given": 40, "machine": 30}
    monkeypatch.setenv(optional.MAX_EXAMPLES_ENV, "few")
    result = run(props)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OMNI_TEST_MAX_EXAMPLES='few': expected a whole number >= 0*"])


def test_slow_tests_are_marked_by_path_and_left_out_of_the_fast_tier(suite):
    (suite.path / "test_slow.py").write_text("def test_costly():\n    pass\n")
    optional.BY_PATH["test_slow.py::test_cost"] = "slow"
    optional.TIERS["slow"] = optional.Tier("costly", None, "", "")
    result = run(suite, "-m", optional.FAST, "--ignore=heavy", "-v")
    result.assert_outcomes(passed=1, deselected=3)
    result = run(suite, "-m", "slow", "--ignore=heavy", "-v")  # no extra: never skipped
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*test_slow.py::test_costly PASSED*"])


def test_a_tier_needing_a_program_skips_without_it_unless_required(suite, monkeypatch):
    (suite.path / "test_site.py").write_text(
        "import pytest\n\n@pytest.mark.browser\ndef test_pages():\n    pass\n"
    )
    tiers = dict(optional.TIERS)
    tiers["browser"] = optional.Tier("B", None, "OMNI_T_REQUIRE_B", "apt it", binary="no-such-b")
    monkeypatch.setattr(optional, "TIERS", tiers)
    result = run(suite, "-m", "browser", "--ignore=heavy", "-rs")
    result.assert_outcomes(skipped=1, deselected=3)
    result.stdout.fnmatch_lines(["*no-such-b not installed (apt it)*"])
    monkeypatch.setenv("OMNI_T_REQUIRE_B", "1")
    result = run(suite, "-m", "browser", "--ignore=heavy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OMNI_T_REQUIRE_B=1 but no-such-b is not installed (apt it)*"])
    tiers["browser"] = optional.Tier("B", None, "OMNI_T_REQUIRE_B", "apt it", binary="sh")
    run(suite, "-m", "browser", "--ignore=heavy").assert_outcomes(passed=1, deselected=3)
