"""The qwen-image pipeline asks the plugin host whether the ``cfg:`` section is registered (no
probe of omni-cfg's module name): guided defaults with omni-cfg enabled, none when disabled."""

from __future__ import annotations

import importlib.util

import pytest
from omni_qwen_image.pipelines import SECTION_CFG, qwen_image_pipeline


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
    data = qwen_image_pipeline().model_dump(mode="json", exclude_none=True)
    assert data[SECTION_CFG]["stage"] == "dit"


def test_no_cfg_section_when_omni_cfg_is_disabled(no_module_probes, monkeypatch):
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "cfg")
    data = qwen_image_pipeline().model_dump(mode="json", exclude_none=True)
    assert SECTION_CFG not in data
