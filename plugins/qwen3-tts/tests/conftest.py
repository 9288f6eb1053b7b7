"""Fixtures of the omni-qwen3-tts tests (the testing kit's come from omni_core.testing).

Every module here is an ``engine``-tier test and needs qwen-tts (requirements/qwen3-tts.txt):
without it the directory is not collected (the kit's one gate). The test process imports qwen-tts
(librosa, numba) and so never runs an in-process vLLM engine; these pipelines have no vLLM stage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_core.testing.parity import BuiltModels
from omni_core.testing.tiers import tier_directory

tier_directory(__file__, "engine", "vllm", "qwen_tts")

pytest_plugins = ["omni_core.testing"]


@pytest.fixture(scope="session")
def tiny_tts(built_model: BuiltModels) -> Path:
    """The built ``tiny-qwen3-tts`` directory (custom_voice/, voice_design/, base/)."""
    return built_model("tiny-qwen3-tts")
