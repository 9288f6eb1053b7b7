"""``create_engine``: builds the engine class a pipeline's ``engine:`` field selects."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_core.config.resolve import resolve_pipeline
from omni_core.config.settings import OmniSettings
from omni_core.engine.base import OmniEngineBase
from omni_core.errors import ConfigError
from omni_core.plugin.hooks import PluginHost


def engine_host(
    settings: OmniSettings | None, plugins: PluginHost | None
) -> tuple[OmniSettings, PluginHost]:
    """An engine's settings and plugin host: the ones given, else read from the environment
    here, once (the only place the engine builds either; everything below gets them passed)."""
    if plugins is not None:
        return settings or plugins.settings, plugins
    settings = settings or OmniSettings()
    return settings, PluginHost.create(settings)


def create_engine(
    pipeline: Any, *, settings: OmniSettings | None = None, plugins: PluginHost | None = None
) -> OmniEngineBase:
    """Build and start the engine of the kind ``pipeline`` selects (``engine:``; default
    ``turn``, an :class:`~omni_core.engine.sync_engine.OmniEngine`-compatible engine).

    ``pipeline``: a pipeline file, a registered name, YAML text's ``PipelineConfig`` or a
    resolved pipeline. Raises ConfigError for a bad pipeline, StartupError when it cannot start.
    """
    settings, plugins = engine_host(settings, plugins)
    resolved = resolve_pipeline(pipeline, plugins)
    cls = resolved.engine_class
    if not (isinstance(cls, type) and issubclass(cls, OmniEngineBase)):
        raise ConfigError([f"engine kind '{resolved.config.engine}' is not an OmniEngineBase"])
    engine: OmniEngineBase = cls(resolved, settings=settings, plugins=plugins)
    return engine


async def create_engine_async(pipeline: Any, **kwargs: Any) -> OmniEngineBase:
    """:func:`create_engine` in a worker thread: the running event loop is not blocked while the
    stages start."""
    return await asyncio.to_thread(create_engine, pipeline, **kwargs)
