"""Fixtures of the duplex tests (the testing kit's come from omni_core.testing)."""

import pytest
from duplex_helpers import pipeline, register

pytest_plugins = ["omni_core.testing"]


@pytest.fixture
def duplex(make_engine, fake_entry_points):
    """``duplex(section=..., thinker=...)`` → a started duplex engine on scripted stages."""
    register(fake_entry_points)

    def make(**kwargs):
        return make_engine(pipeline(**kwargs))

    return make
