"""omni-core: orchestrates multi-stage omni-modality inference; extended through plugins.

Public names are imported lazily (PEP 562): ``import omni_core`` stays cheap, and importing a
stage-client module does not drag in the orchestrator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from omni_core.plugin import ENTRY_POINT_GROUP, PLUGIN_API_VERSION, hookimpl

if TYPE_CHECKING:
    from omni_core.config.pipeline import InputEdge, PipelineConfig, StageConfig
    from omni_core.config.settings import OmniSettings
    from omni_core.engine.async_engine import AsyncOmniEngine
    from omni_core.engine.base import OmniEngineBase
    from omni_core.engine.factory import create_engine, create_engine_async
    from omni_core.engine.sync_engine import OmniEngine
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
    from omni_core.orchestrator.base import OrchestratorBase
    from omni_core.orchestrator.turn import Orchestrator
    from omni_core.outputs import (
        AbortResult,
        ErrorInfo,
        OmniRequestOutput,
        StageOutput,
        StageResult,
    )
    from omni_core.plugin.hooks import PluginHost
    from omni_core.plugin.manager import create_plugin_manager
    from omni_core.sampling import SamplingParams
    from omni_core.stage.client import StageClient, StageContext, StageRequest
    from omni_core.views import (
        PUBLIC_MODULES,
        OrchestratorPort,
        PipelineView,
        RequestView,
        StageState,
        StageView,
    )

_LAZY: dict[str, str] = {
    "AbortResult": "omni_core.outputs",
    "AsyncOmniEngine": "omni_core.engine.async_engine",
    "ConfigError": "omni_core.errors",
    "EngineDeadError": "omni_core.errors",
    "ErrorInfo": "omni_core.outputs",
    "InputEdge": "omni_core.config.pipeline",
    "OmniEngine": "omni_core.engine.sync_engine",
    "OmniEngineBase": "omni_core.engine.base",
    "OmniError": "omni_core.errors",
    "OmniRequestOutput": "omni_core.outputs",
    "OmniSettings": "omni_core.config.settings",
    "OrchestratorPort": "omni_core.views",
    "PUBLIC_MODULES": "omni_core.views",
    "PipelineView": "omni_core.views",
    "Orchestrator": "omni_core.orchestrator.turn",
    "OrchestratorBase": "omni_core.orchestrator.base",
    "PipelineConfig": "omni_core.config.pipeline",
    "PluginConflictError": "omni_core.errors",
    "PluginError": "omni_core.errors",
    "PluginHost": "omni_core.plugin.hooks",
    "PluginLoadError": "omni_core.errors",
    "ReplicaDeadError": "omni_core.errors",
    "RequestError": "omni_core.errors",
    "RequestRejected": "omni_core.errors",
    "RequestView": "omni_core.views",
    "RpcError": "omni_core.errors",
    "SamplingParams": "omni_core.sampling",
    "StageClient": "omni_core.stage.client",
    "StageConfig": "omni_core.config.pipeline",
    "StageContext": "omni_core.stage.client",
    "StageOutput": "omni_core.outputs",
    "StageRequest": "omni_core.stage.client",
    "StageResult": "omni_core.outputs",
    "StageState": "omni_core.views",
    "StageUnavailableError": "omni_core.errors",
    "StageView": "omni_core.views",
    "StartupError": "omni_core.errors",
    "create_engine": "omni_core.engine.factory",
    "create_engine_async": "omni_core.engine.factory",
    "create_plugin_manager": "omni_core.plugin.manager",
}

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "PUBLIC_MODULES",
    "AbortResult",
    "AsyncOmniEngine",
    "ConfigError",
    "EngineDeadError",
    "ErrorInfo",
    "InputEdge",
    "OmniEngine",
    "OmniEngineBase",
    "OmniError",
    "OmniRequestOutput",
    "OmniSettings",
    "Orchestrator",
    "OrchestratorBase",
    "OrchestratorPort",
    "PipelineConfig",
    "PipelineView",
    "PluginConflictError",
    "PluginError",
    "PluginHost",
    "PluginLoadError",
    "ReplicaDeadError",
    "RequestError",
    "RequestRejected",
    "RequestView",
    "RpcError",
    "SamplingParams",
    "StageClient",
    "StageConfig",
    "StageContext",
    "StageOutput",
    "StageRequest",
    "StageResult",
    "StageState",
    "StageUnavailableError",
    "StageView",
    "StartupError",
    "create_engine",
    "create_engine_async",
    "create_plugin_manager",
    "hookimpl",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omni_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
