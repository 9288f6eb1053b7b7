"""The test tiers (the testing kit's pytest plugin, omni_core.testing.tiers): markers declared once
(``--strict-markers``), a directory declared a tier by its conftest, ``-m`` selecting on them, a
missing extra skipping its tests unless its OMNI_REQUIRE_* variable makes that an error, a
deselected directory not even imported, Hypothesis profiles. Run in-process by pytester on a
throwaway suite whose "extras" are a module that exists (``json``) and one that does not."""

from __future__ import annotations

import json

import pytest

from omni_core.testing import tiers

pytest_plugins = ["pytester"]

SUITE = {
    "test_core.py": """
import pytest

def test_logic():
    pass

@pytest.mark.engine
def test_uses_model():
    pass
""",
    "test_cluster.py": """
import pytest

pytestmark = pytest.mark.ray

def test_cluster():
    pass
""",
    "heavy/conftest.py": """
from omni_core.testing.tiers import tier_directory

tier_directory(__file__, "engine")
""",
    "heavy/test_heavy.py": """
raise RuntimeError("imported although its directory was deselected")

def test_never():
    pass
""",
    "needy/conftest.py": """
from omni_core.testing.tiers import tier_directory

tier_directory(__file__, "engine", "json", "omni_no_such_module")
""",
    "needy/test_needy.py": """
raise RuntimeError("imported although a module it needs is missing")
""",
}


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setattr(
        tiers,
        "TIERS",
        {
            **tiers.TIERS,
            "engine": tiers.Tier("real engine", "json", "OMNI_T_REQUIRE_ENGINE", "have json"),
            "ray": tiers.Tier("Ray", "omni_no_such_extra", "OMNI_T_REQUIRE_RAY", "install it"),
        },
    )
    monkeypatch.setattr(tiers, "_DIRECTORIES", {})
    for name in ("OMNI_T_REQUIRE_RAY", "OMNI_T_REQUIRE_ENGINE", tiers.MAX_EXAMPLES_ENV):
        monkeypatch.delenv(name, raising=False)
    for path, text in SUITE.items():
        (pytester.path / path).parent.mkdir(exist_ok=True)
        (pytester.path / path).write_text(text)
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    plain = ("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:hypothesispytest")
    return suite.runpytest_inprocess("-p", "omni_core.testing.tiers", *plain, *args)


def test_the_fast_tier_leaves_out_marked_tests_and_never_imports_a_marked_directory(suite):
    result = run(suite, "-m", "not engine and not ray", "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_core.py::test_logic PASSED*"])


def test_a_directory_tier_marks_its_tests_and_a_missing_extra_skips(suite):
    (suite.path / "heavy" / "test_heavy.py").write_text("def test_heavy():\n    pass\n")
    result = run(suite, "-m", "engine or ray", "-rs", "-v")
    # heavy/ is engine (json installed): imported and run, marked by its conftest; needy/ needs a
    # missing module: never imported; the ray test is skipped naming its extra
    result.assert_outcomes(passed=2, skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*heavy/test_heavy.py::test_heavy PASSED*"])
    result.stdout.fnmatch_lines(["*test_cluster.py*omni_no_such_extra not installed (install it)*"])
    run(suite, "-m", "not engine").assert_outcomes(passed=1, skipped=1, deselected=1)


def test_a_required_missing_extra_is_an_error_naming_its_variable(suite, monkeypatch):
    monkeypatch.setenv("OMNI_T_REQUIRE_RAY", "1")
    result = run(suite, "--ignore=heavy", "--ignore=needy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*OMNI_T_REQUIRE_RAY=1 but omni_no_such_extra is not installed (install it)*"]
    )
    # deselected, they need not run
    run(suite, "--ignore=heavy", "--ignore=needy", "-m", "not ray").assert_outcomes(
        passed=2, deselected=1
    )
    # a declared directory whose module is missing: required, it is an error too
    monkeypatch.setenv("OMNI_T_REQUIRE_ENGINE", "1")
    result = run(suite, "--ignore=heavy", "-m", "engine")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # stops while collecting needy/
    result.stdout.fnmatch_lines(["*OMNI_T_REQUIRE_ENGINE=1 but omni_no_such_module not installed*"])


def test_markers_are_declared_once_and_strict(suite):
    result = run(suite, "--markers")
    for name in tiers.TIERS:
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}: *"])
    (suite.path / "test_typo.py").write_text(
        "import pytest\n\n@pytest.mark.engin\ndef test_x():\n    pass\n"
    )
    result = run(suite, "--strict-markers", "test_typo.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*'engin' not found in `markers` configuration option*"])


def test_the_real_markers_are_registered():
    assert set(tiers.TIERS) == {"engine", "ray", "browser", "slow"}
    assert {tiers.TIERS[m].env for m in ("engine", "ray")} == {
        "OMNI_REQUIRE_VLLM",
        "OMNI_REQUIRE_RAY",
    }
    assert tiers.TIERS["slow"].module is None  # no extra: never skipped, never required
    assert tiers.FAST == "not engine and not ray and not slow"


def test_the_mark_expression_is_read_without_private_apis():
    assert tiers._evaluate(tiers.FAST, set()) and not tiers._evaluate(tiers.FAST, {"slow"})
    assert tiers._evaluate("engine or (ray and not slow)", {"ray"})
    assert not tiers._evaluate("not (engine or ray)", {"engine", "slow"})


PROPS = """
import json
from pathlib import Path

from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from omni_core.testing.tiers import examples

CALLS = {"given": 0, "own": 0, "machine": 0}


@given(st.integers())
@settings(database=None)
def test_a_property(x):
    CALLS["given"] += 1


@settings(max_examples=examples(40), database=None)
@given(st.integers())
def test_its_own_count(x):
    CALLS["own"] += 1


class Machine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        CALLS["machine"] += 1

    @rule()
    def step(self):
        pass


Machine.TestCase.settings = settings(
    max_examples=examples(30), stateful_step_count=2, database=None
)
TestMachine = Machine.TestCase


def test_zz_counts():
    Path("calls.json").write_text(json.dumps(CALLS))
"""


@pytest.fixture
def props(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv(tiers.MAX_EXAMPLES_ENV, raising=False)
    pytester.makepyfile(test_props=PROPS)
    return pytester


def calls(props: pytest.Pytester, *args: str) -> dict[str, int]:
    run(props, *args).assert_outcomes(passed=4)
    return json.loads((props.path / "calls.json").read_text())


def test_the_fast_tier_runs_the_fast_profile_and_the_full_suite_its_counts(props):
    cap = tiers.FAST_EXAMPLES
    assert calls(props) == {"given": 100, "own": 40, "machine": 30}
    capped = {"given": cap, "own": cap, "machine": cap}
    assert calls(props, "-m", "not engine and not ray") == capped
    assert calls(props, "-m", tiers.FAST) == capped
    assert calls(props, "-m", "not ray") == {"given": 100, "own": 40, "machine": 30}


def test_the_examples_cap_variable_applies_to_any_run_and_zero_lifts_it(props, monkeypatch):
    monkeypatch.setenv(tiers.MAX_EXAMPLES_ENV, "3")
    assert calls(props) == {"given": 3, "own": 3, "machine": 3}
    monkeypatch.setenv(tiers.MAX_EXAMPLES_ENV, "0")
    assert calls(props, "-m", tiers.FAST) == {"given": 100, "own": 40, "machine": 30}
    monkeypatch.setenv(tiers.MAX_EXAMPLES_ENV, "few")
    result = run(props)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OMNI_TEST_MAX_EXAMPLES='few': expected a whole number >= 0*"])


def test_a_tier_needing_a_program_skips_without_it_unless_required(suite, monkeypatch):
    (suite.path / "test_site.py").write_text(
        "import pytest\n\n@pytest.mark.browser\ndef test_pages():\n    pass\n"
    )
    args = ("-m", "browser", "--ignore=heavy", "--ignore=needy")
    tiers.TIERS["browser"] = tiers.Tier("B", None, "OMNI_T_REQUIRE_B", "apt it", binary="no-such-b")
    result = run(suite, *args, "-rs")
    result.assert_outcomes(skipped=1, deselected=3)
    result.stdout.fnmatch_lines(["*no-such-b not installed (apt it)*"])
    monkeypatch.setenv("OMNI_T_REQUIRE_B", "1")
    result = run(suite, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OMNI_T_REQUIRE_B=1 but no-such-b is not installed (apt it)*"])
    tiers.TIERS["browser"] = tiers.Tier("B", None, "OMNI_T_REQUIRE_B", "apt it", binary="sh")
    run(suite, *args).assert_outcomes(passed=1, deselected=3)


def test_the_testing_plugin_is_on_in_a_test_run_and_off_in_production(monkeypatch):
    from omni_core import OmniSettings
    from omni_core.plugin.hooks import PluginHost

    assert OmniSettings().testing_kit  # this run's plugin managers have the scripted kind
    assert "scripted" in PluginHost.create(OmniSettings(), load_entry_points=False).stage_kinds()
    monkeypatch.delenv(tiers.TESTING_KIT_ENV)
    production = PluginHost.create(OmniSettings(), load_entry_points=False)
    assert production.pm.get_plugin("testing") is None
    assert "scripted" not in production.stage_kinds()
    assert "scripted-chain" not in production.pipelines()
