"""omni-core's public API, declared once: the names each audience imports, and from where.

Three tiers, each building on the one before, plus the testing kit:

* **embedders** (``omni_core``): build and drive an engine, its configuration, sampling
  parameters, outputs and errors;
* **hook authors** (``omni_core.plugin``): :data:`~omni_core.plugin.hookimpl`, the types the
  registration and decision hooks return, the views and the port the lifecycle hooks receive,
  the plugin host and its queries;
* **stage-kind and engine-kind authors** (``omni_core.extend``): stage clients, the torch
  kind's engine API, the loop inbox, the data plane, media and tiny-model helpers, the bases of
  an engine kind;
* **model-family authors** (``omni_core.family``): the family kit (registration helpers, the
  tiny-checkpoint toolkit and compat shim, checkpoint readers, audio options, streaming vocoder
  windows);
* **the testing kit** (``omni_core.testing`` and its submodules, the parity harness included).

A tier maps each of its public modules to ``{name: the module that defines it}``. Everything
else derives from :data:`TIERS`: ``omni_core.__all__`` (the embedders' ``omni_core`` names),
``omni_core.plugin`` and ``omni_core.extend`` (lazy re-exports), the public-API checker
(:mod:`omni_core.testing.public_api` accepts an import of a manifest name from its public module
only) and the API reference's public-names page. Plugin API 2's import paths (``omni_core.views``,
``omni_core.kinds.torch_kind``, ``from omni_core import hookimpl``, ...: :data:`API2_MODULES`,
:data:`API2_CORE_NAMES`) still import until API 4, but they are not public: the checker accepts
them with a ``DeprecationWarning`` naming the public module (or refuses them, strict).

This module imports nothing of omni-core: reading the manifest is free.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "API2_CORE_NAMES",
    "API2_MODULES",
    "TIERS",
    "Tier",
    "home_of",
    "is_api2_path",
    "lazy_exports",
    "moved_imports",
    "names_of",
    "public_modules",
    "tier_of",
]


@dataclass(frozen=True, slots=True)
class Tier:
    """One audience's public names: ``modules`` maps each public module (the first is the
    tier's own) to ``{name: the module defining it}``."""

    audience: str
    modules: Mapping[str, Mapping[str, str]]

    @property
    def module(self) -> str:
        """The tier's own module (``omni_core``, ``omni_core.plugin``, ...)."""
        return next(iter(self.modules))


def _from(home: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, home)


EMBEDDERS = Tier(
    "embedders",
    {
        "omni_core": {
            **_from("omni_core.engine.factory", "create_engine", "create_engine_async"),
            **_from("omni_core.engine.sync_engine", "OmniEngine"),
            **_from("omni_core.engine.async_engine", "AsyncOmniEngine"),
            **_from("omni_core.config.pipeline", "PipelineConfig", "StageConfig", "InputEdge"),
            **_from("omni_core.config.settings", "OmniSettings"),
            **_from("omni_core.sampling", "SamplingParams"),
            **_from(
                "omni_core.outputs",
                "OmniRequestOutput",
                "StageOutput",
                "StageResult",
                "ErrorInfo",
                "AbortResult",
            ),
            **_from(
                "omni_core.errors",
                "OmniError",
                "ConfigError",
                "EngineDeadError",
                "PluginConflictError",
                "PluginError",
                "PluginLoadError",
                "ReplicaDeadError",
                "RequestError",
                "RequestRejected",
                "RpcError",
                "StageUnavailableError",
                "StartupError",
            ),
        },
        "omni_core.cli": _from("omni_core.cli", "main"),
        "omni_core.serve.ray_serve": _from("omni_core.serve.ray_serve", "omni_app"),
    },
)

HOOK_AUTHORS = Tier(
    "hook authors",
    {
        "omni_core.plugin": {
            **_from(
                "omni_core.plugin",
                "hookimpl",
                "hookspec",
                "PLUGIN_API_VERSION",
                "ENTRY_POINT_GROUP",
            ),
            **_from(
                "omni_core.plugin.types",
                "StageKind",
                "Bridge",
                "PipelineSpec",
                "ModelSpec",
                "EngineKind",
                "ConfigSection",
                "CliGroup",
                "RunOption",
                "ServerRoute",
                "Benchmark",
                "Companion",
                "Admission",
                "ForwardGate",
            ),
            **_from(
                "omni_core.views",
                "PipelineView",
                "RequestView",
                "StageView",
                "StageState",
                "OrchestratorPort",
            ),
            **_from("omni_core.plugin.hooks", "PluginHost"),
            **_from("omni_core.stage.inbox", "hand_off"),
            **_from("omni_core.plugin.manager", "create_plugin_manager"),
            **_from("omni_core.plugin.scope", "PER_PIPELINE_HOOKS", "active_plugins"),
            **_from("omni_core.pipelines", "packaged_pipeline"),
            **_from("omni_core.cli.app", "report_error"),
            **_from("omni_core.bench.orchestration", "Row", "CheckFailed"),
        },
    },
)

EXTENDERS = Tier(
    "stage-kind and engine-kind authors",
    {
        "omni_core.extend": {
            **_from(
                "omni_core.stage.client",
                "StageClient",
                "PushingStageClient",
                "OutputSink",
                "StageContext",
                "StageRequest",
            ),
            **_from("omni_core.stage.local", "LocalStageClient"),
            **_from("omni_core.stage.process", "ProcessStageClient"),
            **_from("omni_core.stage.inbox", "LoopInbox", "Turn"),
            **_from("omni_core.stage.worker", "WorkerEngine", "error_output"),
            **_from(
                "omni_core.kinds.torch_kind",
                "TorchStageEngine",
                "TorchArgs",
                "default_plane",
                "process_client",
                "resolve_model",
                "stage_model",
            ),
            **_from(
                "omni_core.kinds.vllm_session",
                "ResumableSession",
                "PromptTooLongError",
                "build_engine",
                "refusal",
                "stop_now_processor",
                "hidden_state_capture",
            ),
            **_from("omni_core.outputs", "HiddenStates"),
            **_from("omni_core.media", "AudioChunk", "Image", "IMAGE_OPTIONS", "AUDIO_OPTIONS"),
            **_from("omni_core.models.tiny", "packaged_checksums", "train_qwen2_bpe"),
            **_from("omni_core.engine.base", "OmniEngineBase"),
            **_from("omni_core.engine.channel", "RequestStream"),
            **_from("omni_core.orchestrator.base", "OrchestratorBase"),
            **_from("omni_core.orchestrator.turn", "Orchestrator"),
            **_from("omni_core.messages", "EngineMessage"),
            **_from("omni_core.chat", "ChatOptions"),
            **_from(
                "omni_core.serve.tools",
                "ToolDef",
                "NamedToolChoice",
                "ToolCalling",
                "check_tools",
                "forced_schema",
                "load_parser",
            ),
            **_from("omni_core.serve.errors", "ApiError"),
        },
    },
)

FAMILY_AUTHORS = Tier(
    "model-family authors (the family kit)",
    {
        "omni_core.family": {
            **_from("omni_core.family.registration", "tiny_model", "lazy_pipeline", "lazy"),
            **_from(
                "omni_core.family.tiny",
                "corpus",
                "bpe_tokenizer",
                "shrink",
                "require_consistent",
                "redraw",
                "checksums",
                "quiet_transformers",
                "whisper_features",
                "omni_chat_template",
                "omni_processor",
                "write_checkpoint",
            ),
            **_from(
                "omni_core.family.checkpoint",
                "local_checkpoint",
                "read_rows",
                "generation_config",
                "token_ids",
                "ImageGrid",
            ),
            **_from("omni_core.family.weights", "load_part", "read_part", "fuse_experts"),
            **_from("omni_core.family.audio", "audio_streamed"),
            **_from("omni_core.family.decode", "Decoding", "batch_cache", "take_rows"),
            **_from(
                "omni_core.family.windows",
                "causal_piece",
                "causal_stream",
                "exact_context",
                "context_window",
                "crossfade",
                "receptive_field",
                "padded_render",
            ),
        },
        "omni_core.family.compat": _from(
            "omni_core.family.compat",
            "install",
            "installed",
            "needed",
            "stub_video_processor_class",
            "pythonpath_entry",
            "PORTABLE_PYTHONPATH",
            "SHIM_DIR",
        ),
    },
)

TESTING = Tier(
    "plugin tests (the testing kit)",
    {
        "omni_core.testing": _from(
            "omni_core.testing.scripted_core", "ScriptedArgs", "prompt_tokens", "scripted_token"
        ),
        "omni_core.testing.fixtures": _from(
            "omni_core.testing.fixtures",
            "make_engine",
            "fake_entry_points",
            "plugin_host",
            "omni_settings",
            "FakeEntryPoints",
        ),
        "omni_core.testing.server": _from("omni_core.testing.server", "running_server"),
        "omni_core.testing.tiers": _from(
            "omni_core.testing.tiers", "tier_directory", "examples", "TIERS", "FAST", "Tier"
        ),
        "omni_core.testing.speech": _from(
            "omni_core.testing.speech", "served_openai_client", "streamed_speech", "audio_deltas"
        ),
        "omni_core.testing.public_api": _from(
            "omni_core.testing.public_api", "public_api_violations"
        ),
        "omni_core.testing.parity": _from(
            "omni_core.testing.parity",
            "built_model",
            "BuiltModels",
            "check_exact",
            "check_ids_or_top_k",
            "check_bounded",
            "collect_outputs",
            "greedy_top_k",
            "GreedyParity",
            "family_fixtures",
            "pipeline_engine",
            "top_k_oracle",
            "rebuild_in_fresh_process",
            "load_reference",
            "ParityError",
        ),
    },
)

TIERS: tuple[Tier, ...] = (EMBEDDERS, HOOK_AUTHORS, EXTENDERS, FAMILY_AUTHORS, TESTING)
"""Every public name of omni-core, per audience."""

API2_MODULES: frozenset[str] = frozenset(
    {
        "omni_core",
        "omni_core.views",
        "omni_core.plugin",
        "omni_core.plugin.types",
        "omni_core.errors",
        "omni_core.outputs",
        "omni_core.sampling",
        "omni_core.media",
        "omni_core.models.tiny",
        "omni_core.config.pipeline",
        "omni_core.stage.client",
        "omni_core.stage.local",
        "omni_core.stage.inbox",
        "omni_core.stage.process",
        "omni_core.stage.worker",
        "omni_core.kinds.torch_kind",
        "omni_core.kinds.vllm_session",
        "omni_core.engine.base",
        "omni_core.engine.channel",
        "omni_core.orchestrator.base",
        "omni_core.messages",
        "omni_core.testing",
        "omni_core.testing.fixtures",
        "omni_core.testing.server",
        "omni_core.testing.public_api",
        "omni_core.cli",
        "omni_core.cli.app",
        "omni_core.bench.orchestration",
    }
)
"""The modules plugin API 2 documented as public (``omni_core.views.PUBLIC_MODULES`` then): every
name a plugin imported from one keeps importing, deprecated, until plugin API 4 (the checker
accepts it with a ``DeprecationWarning`` naming the public module)."""

API2_CORE_NAMES: frozenset[str] = frozenset(
    {
        "ENTRY_POINT_GROUP",
        "PLUGIN_API_VERSION",
        "PUBLIC_MODULES",
        "OmniEngineBase",
        "Orchestrator",
        "OrchestratorBase",
        "OrchestratorPort",
        "PipelineView",
        "PluginHost",
        "RequestView",
        "StageClient",
        "StageContext",
        "StageRequest",
        "StageState",
        "StageView",
        "create_plugin_manager",
        "hookimpl",
    }
)
"""Names ``omni_core`` itself offered under plugin API 2 that moved to another tier's module in
API 3 (``from omni_core import hookimpl``): deprecated until API 4, like :data:`API2_MODULES`."""


def is_api2_path(module: str, name: str) -> bool:
    """Whether ``from module import name`` was public under plugin API 2 (so it keeps working,
    deprecated, until API 4) while it is not a public import now."""
    if module == "omni_core":
        return name in API2_CORE_NAMES or f"omni_core.{name}" in API2_MODULES
    if module in _BY_MODULE and module not in ("omni_core.views",):
        # still a public module: only a submodule that API 2 made public moved
        return f"{module}.{name}" in API2_MODULES and f"{module}.{name}" not in _BY_MODULE
    return module in API2_MODULES


def moved_imports() -> dict[str, dict[str, list[str]]]:
    """Every API 2 import path of a public name that API 3 moved: ``{old module: {name: [its
    public modules]}}`` (the migration guide's table, docs/plugins.md)."""
    moved: dict[str, dict[str, list[str]]] = {}
    for name in sorted(API2_CORE_NAMES):
        moved.setdefault("omni_core", {})[name] = home_of(name)
    for tier in TIERS:
        for names in tier.modules.values():
            for name, defining in names.items():
                if defining in API2_MODULES and defining not in _BY_MODULE:
                    moved.setdefault(defining, {})[name] = home_of(name)
    return {module: dict(sorted(names.items())) for module, names in sorted(moved.items())}


_BY_MODULE: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {module: MappingProxyType(dict(names)) for t in TIERS for module, names in t.modules.items()}
)


def public_modules() -> frozenset[str]:
    """Every module a plugin may import from (each only for its manifest names)."""
    return frozenset(_BY_MODULE)


def names_of(module: str) -> Mapping[str, str]:
    """``{name: defining module}`` of a public module (empty for any other module)."""
    return _BY_MODULE.get(module, MappingProxyType({}))


def home_of(name: str) -> list[str]:
    """The public modules ``name`` is imported from (a migration hint for an old path)."""
    return [module for module, names in _BY_MODULE.items() if name in names]


def tier_of(module: str) -> Tier | None:
    """The tier a public module belongs to."""
    return next((t for t in TIERS if module in t.modules), None)


def lazy_exports(
    module: str, namespace: dict[str, Any], also: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """PEP 562 ``__getattr__`` and ``__dir__`` for a tier's module: each manifest name of
    ``module`` is imported from its defining module on first access and cached in ``namespace``.
    Each of ``also`` (``{name: defining module}``: API 2 names kept importable until API 4) is
    imported the same way with a ``DeprecationWarning`` naming its public module, on every
    access (not cached, so each importing module is warned)."""
    public = dict(names_of(module))
    old = {name: home for name, home in (also or {}).items() if name not in public}

    def __getattr__(name: str) -> Any:
        home = public.get(name)
        if home is None:
            home = old.get(name)
            if home is None:
                raise AttributeError(f"module {module!r} has no attribute {name!r}")
            homes = home_of(name)
            instead = f"import it from {' and '.join(homes)}" if homes else "it is not public"
            warnings.warn(
                f"'from {module} import {name}' is deprecated since plugin API 3 and goes in API "
                f"4: {instead} (docs/plugins.md#migrating-from-api-2-to-api-3)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(home), name)
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public) | set(old))

    return __getattr__, __dir__
