from __future__ import annotations

from omni_core.config.settings import OmniSettings


def test_settings_read_omni_env(monkeypatch):
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "a,b ,,c")
    monkeypatch.setenv("OMNI_REQUEST_QUEUE_SIZE", "7")
    monkeypatch.setenv("OMNI_STARTUP_TIMEOUT_S", "2.5")
    settings = OmniSettings()
    assert settings.disable_plugins == ["a", "b", "c"]
    assert settings.request_queue_size == 7
    assert settings.startup_timeout_s == 2.5


def test_empty_disable_list(monkeypatch):
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "")
    assert OmniSettings().disable_plugins == []
