"""The whole repository's suite (tests/, plugins/*/tests, examples/*/tests): the test tiers' markers
and the one gate for optional extras (tests/optional.py)."""

pytest_plugins = ["tests.optional"]
