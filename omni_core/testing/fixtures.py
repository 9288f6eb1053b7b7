"""pytest fixtures of the testing kit (loaded by ``pytest_plugins = ["omni_core.testing"]``)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.base import OmniEngineBase
from omni_core.engine.factory import create_engine
from omni_core.plugin import ENTRY_POINT_GROUP
from omni_core.plugin.hooks import PluginHost


@dataclass
class FakeDistribution:
    name: str
    version: str


@dataclass
class FakeEntryPoint:
    """Quacks like ``importlib.metadata.EntryPoint`` for the plugin manager."""

    name: str
    value: str
    dist: FakeDistribution
    group: str = ENTRY_POINT_GROUP
    target: Any = None

    def load(self) -> Any:
        if isinstance(self.target, BaseException):
            raise self.target
        if self.target is not None:
            return self.target
        __import__(self.value)
        return sys.modules[self.value]


@dataclass
class FakeEntryPoints:
    """Entry points the plugin manager sees instead of the installed ones."""

    entries: list[FakeEntryPoint] = field(default_factory=list)

    def add(
        self,
        name: str,
        plugin: Any = None,
        *,
        distribution: str = "fake-plugin",
        version: str = "1.0",
        value: str | None = None,
    ) -> FakeEntryPoint:
        """Add a plugin: a module/object, an exception (import fails), or ``value`` to import."""
        if value is None:
            value = plugin.__name__ if isinstance(plugin, types.ModuleType) else f"fake.{name}"
        ep = FakeEntryPoint(name, value, FakeDistribution(distribution, version), target=plugin)
        self.entries.append(ep)
        return ep


KEPT_ENV = frozenset({"OMNI_CACHE_DIR", "OMNI_TESTING_KIT"})
"""``OMNI_*`` variables :func:`omni_settings` keeps: where built models live (rebuilding the demo
models outside the user's cache would cost every test tens of seconds) and the testing kit's
switch (its plugin registered: the ``scripted`` kind)."""


@pytest.fixture
def omni_settings(monkeypatch: pytest.MonkeyPatch) -> OmniSettings:
    """Settings isolated from the user's ``OMNI_*`` configuration, with short timeouts.

    **For the test's duration, every ``OMNI_*`` variable except ``OMNI_CACHE_DIR`` is removed
    from the process environment** (``os.environ``, so replica processes and any
    ``OmniSettings()`` built during the test see them unset too; monkeypatch restores them after
    the test), then the settings are read with ``startup_timeout_s=30`` and
    ``shutdown_timeout_s=5``. ``OMNI_CACHE_DIR`` is kept (:data:`KEPT_ENV`): models are built once
    into the user's cache, not per test. Set a variable a test needs after this fixture
    (``monkeypatch.setenv``) or pass settings of its own (``omni_settings.model_copy(update=...)``).
    """
    import os

    for key in list(os.environ):
        if key.startswith("OMNI_") and key not in KEPT_ENV:
            monkeypatch.delenv(key)
    return OmniSettings(startup_timeout_s=30.0, shutdown_timeout_s=5.0)


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> FakeEntryPoints:
    """Replace installed ``omni_core.plugins`` entry points with fakes (none by default)."""
    fakes = FakeEntryPoints()
    monkeypatch.setattr("omni_core.plugin.manager._iter_entry_points", lambda: list(fakes.entries))
    return fakes


@pytest.fixture
def plugin_host(omni_settings: OmniSettings, fake_entry_points: FakeEntryPoints) -> PluginHost:
    """A fresh plugin manager (built-ins plus ``fake_entry_points``) behind its facade."""
    return PluginHost.create(omni_settings)


@pytest.fixture
def make_engine(
    omni_settings: OmniSettings, fake_entry_points: FakeEntryPoints
) -> Iterator[Callable[..., OmniEngineBase]]:
    """``make_engine(pipeline, *, settings=None, plugins=None)`` → a started
    engine of the pipeline's engine kind, shut down after the test.

    ``pipeline``: YAML text, a :class:`~omni_core.config.pipeline.PipelineConfig`, a file or a
    registered name. ``settings``: the engine's :class:`~omni_core.config.settings.OmniSettings`
    (default: the ``omni_settings`` fixture's). ``plugins``: a
    :class:`~omni_core.plugin.hooks.PluginHost`; without one, a plugin manager is built at the
    call, so entry points added to ``fake_entry_points`` earlier in the test are loaded.
    """
    engines: list[OmniEngineBase] = []

    def make(pipeline: str | PipelineConfig, **kwargs: Any) -> Any:
        if isinstance(pipeline, str) and "\n" in pipeline:
            pipeline = PipelineConfig.from_yaml_text(pipeline, source="<test pipeline>")
        settings = kwargs.setdefault("settings", omni_settings)
        if "plugins" not in kwargs:
            kwargs["plugins"] = PluginHost.create(settings)
        engine = create_engine(pipeline, **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()
