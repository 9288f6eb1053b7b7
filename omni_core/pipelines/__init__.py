"""Pipelines shipped with omni-core (registered by the built-in plugin)."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from omni_core.errors import ConfigError

PACKAGED = ("scripted-chain", "tiny-omni")
"""The pipeline files shipped here, by name."""


def packaged_pipeline(name: str) -> dict[str, Any]:
    """A pipeline shipped with omni-core (:data:`PACKAGED`) as the mapping its file holds, a
    fresh copy: a plugin deriving a pipeline from it updates the mapping and passes it to
    :meth:`~omni_core.config.pipeline.PipelineConfig.from_dict`. An unknown name raises
    :class:`~omni_core.errors.ConfigError` naming the packaged ones."""
    if name not in PACKAGED:
        raise ConfigError([f"no packaged pipeline {name!r} (packaged: {', '.join(PACKAGED)})"])
    text = resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data
