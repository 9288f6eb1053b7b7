"""The testing kit's ``omni_settings``: isolated from the user's ``OMNI_*``, not from their cache."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def user_environment(monkeypatch, tmp_path):
    """What a user's shell has set before the test (set up before ``omni_settings``)."""
    monkeypatch.setenv("OMNI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMNI_MAX_N", "3")
    return tmp_path / "cache"


def test_omni_settings_keeps_the_cache_and_drops_other_omni_variables(
    user_environment, omni_settings
):
    assert omni_settings.cache_dir == user_environment
    assert os.environ["OMNI_CACHE_DIR"] == str(user_environment)
    assert "OMNI_MAX_N" not in os.environ and omni_settings.max_n == 16
    assert omni_settings.startup_timeout_s == 30.0
