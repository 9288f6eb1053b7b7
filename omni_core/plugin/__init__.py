"""The plugin system: markers, manager factory, typed hook facade and plugin types."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "omni_core"
"""pluggy's project name: only impls marked with this project's :data:`hookimpl` are hooks."""
ENTRY_POINT_GROUP = "omni_core.plugins"
"""The entry-point group plugins are installed under (the entry point's name is the plugin's)."""
PLUGIN_API_VERSION = 3
"""The plugin API this omni-core provides; a plugin declares ``OMNI_PLUGIN_API_VERSION``."""
SUPPORTED_API_VERSIONS: frozenset[int] = frozenset({2, 3})
"""Versions a plugin may declare: older ones still load unchanged (a deprecation cycle: see
docs/plugins.md, "Migrating from API 2 to API 3")."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a hook implementation: ``@hookimpl`` (or ``@hookimpl(tryfirst=True, wrapper=True,
optionalhook=True, ...)``, pluggy's options) on a function, or a method of a per-pipeline plugin
object, named like a hook of :mod:`omni_core.hookspecs`."""
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a hook specification: a plugin declaring hooks of its own marks them with it and adds
them in ``omni_addhooks``."""

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "PROJECT_NAME",
    "SUPPORTED_API_VERSIONS",
    "hookimpl",
    "hookspec",
]
