"""Builds plugin managers: built-in plugins, then entry points of ``omni_core.plugins``.

Nothing here runs at import time; every call of :func:`create_plugin_manager` makes a fresh one.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from omni_core import hookspecs
from omni_core.config.settings import OmniSettings
from omni_core.errors import PluginLoadError
from omni_core.plugin import ENTRY_POINT_GROUP, PLUGIN_API_VERSION, PROJECT_NAME

logger = logging.getLogger(__name__)

# Built-in plugins: (name, module). Registered exactly like third-party ones.
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("builtin", "omni_core.plugin.builtin"),
    ("testing", "omni_core.testing.plugin"),
)


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered plugin came from (shown by ``omni plugins list``)."""

    name: str
    distribution: str
    version: str
    module: str
    builtin: bool


class OmniPluginManager(pluggy.PluginManager):
    """A pluggy manager that only looks at ``omni_``-prefixed attributes and records origins."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.plugin_info: dict[str, PluginInfo] = {}
        self.disabled: list[str] = []

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if not name.startswith("omni_"):
            return None
        return super().parse_hookimpl_opts(plugin, name)


def _iter_entry_points() -> Iterable[md.EntryPoint]:
    """The installed entry points of our group (the testing kit fakes this)."""
    return md.entry_points(group=ENTRY_POINT_GROUP)


def _check_api_version(module: Any, where: str) -> None:
    declared = getattr(module, "OMNI_PLUGIN_API_VERSION", None)
    if declared is None:
        raise PluginLoadError(
            f"{where} does not declare OMNI_PLUGIN_API_VERSION "
            f"(omni-core plugin API version is {PLUGIN_API_VERSION})"
        )
    if declared != PLUGIN_API_VERSION:
        raise PluginLoadError(
            f"{where} declares plugin API version {declared!r}, but this omni-core provides "
            f"version {PLUGIN_API_VERSION}"
        )


def _register(pm: OmniPluginManager, plugin: Any, name: str, where: str) -> None:
    _check_api_version(plugin, where)
    if pm.get_plugin(name) is not None:
        raise PluginLoadError(f"{where}: the name '{name}' is already registered")
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except (pluggy.PluginValidationError, ValueError) as exc:
        if pm.is_registered(plugin):
            pm.unregister(plugin)
        raise PluginLoadError(f"{where} is invalid: {exc}") from exc


def create_plugin_manager(
    settings: OmniSettings | None = None,
    *,
    builtins: Sequence[tuple[str, str]] = BUILTIN_PLUGINS,
    load_entry_points: bool = True,
    extra_plugins: Sequence[tuple[str, Any]] = (),
) -> OmniPluginManager:
    """A fresh plugin manager with built-ins, installed entry points and ``extra_plugins``.

    Plugins named in ``settings.disable_plugins`` (``OMNI_DISABLE_PLUGINS``) are blocked before
    they are imported. A plugin that fails to import or register raises
    :class:`~omni_core.errors.PluginLoadError` naming the entry point, distribution and version.
    """
    settings = settings or OmniSettings()
    pm = OmniPluginManager()
    # historic: every plugin registered below gets omni_addhooks as it registers
    pm.hook.omni_addhooks.call_historic(kwargs={"plugin_manager": pm})
    for name in settings.disable_plugins:
        pm.set_blocked(name)
        pm.disabled.append(name)

    for name, module_name in builtins:
        if pm.is_blocked(name):
            continue
        module = importlib.import_module(module_name)
        _register(pm, module, name, f"built-in plugin '{name}' ({module_name})")
        pm.plugin_info[name] = PluginInfo(name, "omni-core", _own_version(), module_name, True)

    if load_entry_points:
        for ep in _iter_entry_points():
            _load_entry_point(pm, ep)

    for name, plugin in extra_plugins:
        if not pm.is_blocked(name):
            _register(pm, plugin, name, f"plugin '{name}'")
            where = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
            pm.plugin_info[name] = PluginInfo(name, "<local>", "", where, False)
    return pm


def _load_entry_point(pm: OmniPluginManager, ep: md.EntryPoint) -> None:
    if pm.is_blocked(ep.name):
        logger.info("plugin %r disabled by OMNI_DISABLE_PLUGINS", ep.name)
        return
    dist = getattr(ep, "dist", None)
    dist_name = dist.name if dist is not None else "<unknown distribution>"
    version = dist.version if dist is not None else "?"
    where = f"plugin '{ep.name}' (entry point '{ep.value}' from {dist_name} {version})"
    if pm.get_plugin(ep.name) is not None:
        raise PluginLoadError(f"{where}: the name '{ep.name}' is already registered")
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PluginLoadError(f"{where} failed to import: {type(exc).__name__}: {exc}") from exc
    _register(pm, plugin, ep.name, where)
    pm.plugin_info[ep.name] = PluginInfo(ep.name, dist_name, version, ep.value, False)


def _own_version() -> str:
    try:
        return md.version("omni-core")
    except md.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"
