"""omni-core: orchestrates multi-stage omni-modality inference; extended through plugins.

``omni_core.__all__`` is the embedders' tier of the public API (:mod:`omni_core.public`, the
manifest): build and drive an engine, its configuration, sampling parameters, outputs and errors.
Hook authors import from :mod:`omni_core.plugin`, stage-kind authors from
:mod:`omni_core.extend`.

Names are imported lazily (PEP 562): ``import omni_core`` stays cheap, and importing a
stage-client module does not drag in the orchestrator.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the lazy re-exports, for type checkers)
from __future__ import annotations

from typing import TYPE_CHECKING

from omni_core.public import lazy_exports, names_of

if TYPE_CHECKING:
    from omni_core.config.pipeline import (
        InputEdge,
        PipelineConfig,
        StageConfig,
    )
    from omni_core.config.settings import (
        OmniSettings,
    )
    from omni_core.engine.async_engine import (
        AsyncOmniEngine,
    )
    from omni_core.engine.factory import (
        create_engine,
        create_engine_async,
    )
    from omni_core.engine.sync_engine import (
        OmniEngine,
    )
    from omni_core.errors import (
        ConfigError,
        EngineDeadError,
        OmniError,
        PluginConflictError,
        PluginError,
        PluginLoadError,
        ReplicaDeadError,
        RequestError,
        RequestRejected,
        RpcError,
        StageUnavailableError,
        StartupError,
    )
    from omni_core.outputs import (
        AbortResult,
        ErrorInfo,
        OmniRequestOutput,
        StageOutput,
        StageResult,
    )
    from omni_core.sampling import (
        SamplingParams,
    )

__version__ = "0.1.0"

# Names this module offered before the tiers: still importable from here (old plugins keep
# working), but not public here: the checker asks for their tier's module.
_MOVED: dict[str, str] = {
    **dict.fromkeys(("ENTRY_POINT_GROUP", "PLUGIN_API_VERSION", "hookimpl"), "omni_core.plugin"),
    "PluginHost": "omni_core.plugin.hooks",
    "create_plugin_manager": "omni_core.plugin.manager",
    **dict.fromkeys(
        ("PUBLIC_MODULES", "OrchestratorPort", "PipelineView", "RequestView", "StageState"),
        "omni_core.views",
    ),
    "StageView": "omni_core.views",
    **dict.fromkeys(("StageClient", "StageContext", "StageRequest"), "omni_core.stage.client"),
    "OmniEngineBase": "omni_core.engine.base",
    "OrchestratorBase": "omni_core.orchestrator.base",
    "Orchestrator": "omni_core.orchestrator.turn",
}

__all__ = list(names_of(__name__))

__getattr__, __dir__ = lazy_exports(__name__, globals(), also=_MOVED)
