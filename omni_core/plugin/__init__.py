"""The plugin system, and the public names of hook authors (the manifest's hook-author tier,
:mod:`omni_core.public`): the markers and API version defined here, then, imported lazily, the
types the registration and decision hooks return, the views and the port lifecycle hooks
receive, the plugin host, :func:`~omni_core.stage.inbox.hand_off` (from another thread onto the
orchestrator's loop), :func:`~omni_core.pipelines.packaged_pipeline`, a CLI group's
:func:`~omni_core.cli.app.report_error` and a benchmark's ``Row`` / ``CheckFailed``::

    from omni_core.plugin import Admission, PipelineView, RequestView, hookimpl
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the lazy re-exports, for type checkers)
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from omni_core.public import lazy_exports, names_of

if TYPE_CHECKING:
    from omni_core.bench.orchestration import (
        CheckFailed,
        Row,
    )
    from omni_core.cli.app import (
        report_error,
    )
    from omni_core.pipelines import (
        packaged_pipeline,
    )
    from omni_core.plugin.hooks import (
        PluginHost,
    )
    from omni_core.plugin.manager import (
        create_plugin_manager,
    )
    from omni_core.plugin.scope import (
        PER_PIPELINE_HOOKS,
        active_plugins,
    )
    from omni_core.plugin.types import (
        Admission,
        Benchmark,
        Bridge,
        CliGroup,
        Companion,
        ConfigSection,
        EngineKind,
        ForwardGate,
        ModelSpec,
        PipelineSpec,
        RunOption,
        ServerRoute,
        StageKind,
    )
    from omni_core.stage.inbox import (
        hand_off,
    )
    from omni_core.views import (
        OrchestratorPort,
        PipelineView,
        RequestView,
        StageState,
        StageView,
    )


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

__all__ = [*names_of(__name__), "PROJECT_NAME", "SUPPORTED_API_VERSIONS"]

__getattr__, __dir__ = lazy_exports(__name__, globals())
