"""The qwen-image pipeline asks the plugin host it was given whether the ``cfg:`` section is
registered: no probe of omni-cfg's module name, no host built from the environment (settings
set in code are what it sees)."""

from __future__ import annotations

import importlib.util

import pytest
from omni_qwen_image.pipelines import SECTION_CFG

from omni_core import OmniSettings
from omni_core.plugin import PluginHost


@pytest.fixture
def no_module_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def refuse(name: str, *args: object) -> object:
        if name.startswith("omni_cfg"):
            raise AssertionError(f"probed {name!r} by module name")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", refuse)


def test_guided_defaults_when_omni_cfg_is_registered(no_module_probes, monkeypatch):
    monkeypatch.delenv("OMNI_DISABLE_PLUGINS", raising=False)
    host = PluginHost.create(OmniSettings(disable_plugins=[]))
    data = host.pipeline_config("qwen-image").model_dump(mode="json", exclude_none=True)
    assert data[SECTION_CFG]["stage"] == "dit"


def test_no_cfg_section_when_the_host_given_disables_omni_cfg(no_module_probes, monkeypatch):
    # the environment enables every plugin; only the settings built in code disable omni-cfg:
    # a pipeline that asked a host of its own (built from the environment) got the section
    monkeypatch.delenv("OMNI_DISABLE_PLUGINS", raising=False)
    host = PluginHost.create(OmniSettings(disable_plugins=["cfg"]))
    data = host.pipeline_config("qwen-image").model_dump(mode="json", exclude_none=True)
    assert SECTION_CFG not in data
