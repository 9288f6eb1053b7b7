"""omni-core: orchestrates multi-stage omni-modality inference; extended through plugins."""

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
    RequestError,
    RpcError,
    StageUnavailableError,
    StartupError,
)
from omni_core.orchestrator.base import OrchestratorBase
from omni_core.orchestrator.turn import Orchestrator
from omni_core.outputs import AbortResult, ErrorInfo, OmniRequestOutput, StageOutput, StageResult
from omni_core.plugin import ENTRY_POINT_GROUP, PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.manager import create_plugin_manager
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageClient, StageContext, StageRequest

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
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
    "PipelineConfig",
    "PluginConflictError",
    "PluginError",
    "PluginHost",
    "PluginLoadError",
    "RequestError",
    "RpcError",
    "SamplingParams",
    "StageClient",
    "StageConfig",
    "StageContext",
    "StageOutput",
    "StageRequest",
    "StageResult",
    "StageUnavailableError",
    "StartupError",
    "create_engine",
    "create_engine_async",
    "create_plugin_manager",
    "hookimpl",
]
