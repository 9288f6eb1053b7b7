"""Registered pipelines loaded through the host that resolves them (and derived from each other).

A pipeline factory that takes the host can ask it for another plugin's registered pipeline
(``host.pipeline_config(NAME)``) and derive its own from that (``PipelineConfig.derive``): no
second plugin host, no environment read (docs/plugins.md "Deriving a pipeline").
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from omni_core.errors import ConfigError

if TYPE_CHECKING:
    from omni_core.config.pipeline import PipelineConfig
    from omni_core.plugin.hooks import PluginHost

# the registered pipelines being built in this context, outermost first (a cycle is an error)
_LOADING: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "omni_pipelines_loading", default=()
)


def registered_config(host: PluginHost, name: str) -> PipelineConfig:
    """A fresh config of the pipeline registered as ``name``, its factory given ``host``.

    ConfigError when no enabled plugin registers ``name`` or when pipelines derive from each
    other in a cycle (naming the chain)."""
    named = host.pipelines()
    spec = named.get(name)
    if spec is None:
        known = ", ".join(sorted(named)) or "none"
        raise ConfigError([f"pipeline '{name}' is not registered (registered: {known})"])
    chain = _LOADING.get()
    if name in chain:
        cycle = " -> ".join((*chain[chain.index(name) :], name))
        raise ConfigError([f"pipeline '{name}': registered pipelines derive in a cycle: {cycle}"])
    token = _LOADING.set((*chain, name))
    try:
        config = spec.config(host)
    finally:
        _LOADING.reset(token)
    return config.model_copy(deep=True)
