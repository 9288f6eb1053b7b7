"""The plugin system: markers, manager factory, typed hook facade and plugin types."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "omni_core"
ENTRY_POINT_GROUP = "omni_core.plugins"
PLUGIN_API_VERSION = 3
# Older versions still loaded unchanged (a deprecation cycle: see docs/plugins.md, "Migrating
# from API 2 to API 3").
SUPPORTED_API_VERSIONS: frozenset[int] = frozenset({2, 3})

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
hookspec = pluggy.HookspecMarker(PROJECT_NAME)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "PROJECT_NAME",
    "SUPPORTED_API_VERSIONS",
    "hookimpl",
    "hookspec",
]
