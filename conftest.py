"""The whole repository's suite (tests/, plugins/*/tests, examples/*/tests): the test tiers'
markers, the one extras gate and the Hypothesis profiles come from the testing kit's pytest plugin
(omni_core.testing.tiers); a directory that is a tier as a whole says so in its own conftest."""

pytest_plugins = ["omni_core.testing.tiers"]
