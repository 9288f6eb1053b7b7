"""The plugin system: markers, manager factory, typed hook facade and plugin types."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "omni_core"
ENTRY_POINT_GROUP = "omni_core.plugins"
PLUGIN_API_VERSION = 2

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
hookspec = pluggy.HookspecMarker(PROJECT_NAME)

__all__ = ["ENTRY_POINT_GROUP", "PLUGIN_API_VERSION", "PROJECT_NAME", "hookimpl", "hookspec"]
