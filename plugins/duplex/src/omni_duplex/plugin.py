"""The hook implementations omni-core loads (entry point ``duplex`` → this module).

Cheap to import: the engine, numpy and the server code are imported inside the hooks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy
from omni_core.plugin import (
    Benchmark,
    CliGroup,
    ConfigSection,
    EngineKind,
    PipelineSpec,
    ServerRoute,
    hookimpl,
)

if TYPE_CHECKING:
    from omni_core import PipelineConfig

    from omni_duplex.model import DuplexModelSpec

OMNI_PLUGIN_API_VERSION = 3


@hookimpl
def omni_addhooks(plugin_manager: pluggy.PluginManager) -> None:
    from omni_duplex import hookspecs

    plugin_manager.add_hookspecs(hookspecs)


@hookimpl
def omni_register_engine_kinds() -> Iterable[EngineKind]:
    from omni_duplex.engine import DuplexOmniEngine

    return [EngineKind("duplex", DuplexOmniEngine, "full-duplex speech sessions (omni-duplex)")]


@hookimpl
def omni_register_config_sections() -> Iterable[ConfigSection]:
    from omni_duplex.config import DuplexSection

    return [ConfigSection("duplex", DuplexSection, "duplex engine: model plug and session limits")]


@hookimpl
def omni_duplex_register_models() -> Iterable[DuplexModelSpec]:
    from omni_duplex import chat
    from omni_duplex.model import DuplexModelSpec, TinyOmniModel

    return [
        DuplexModelSpec(
            "tiny-omni", lambda pipeline, section: TinyOmniModel(), "text prompt in; text + audio"
        ),
        DuplexModelSpec(
            chat.NAME, chat.build, "the chat template's prompt in (tools); text + audio"
        ),
    ]


def _tiny_omni_duplex() -> PipelineConfig:
    from omni_core import PipelineConfig
    from omni_core.plugin import packaged_pipeline

    data: dict[str, Any] = packaged_pipeline("tiny-omni")
    data.update(
        name="tiny-omni-duplex",
        engine="duplex",
        requires_plugins=["duplex"],
        duplex={"model": "tiny-omni"},
    )
    return PipelineConfig.from_dict(data, source="<pipeline tiny-omni-duplex>")


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [PipelineSpec("tiny-omni-duplex", _tiny_omni_duplex, "tiny-omni as duplex sessions")]


@hookimpl
def omni_register_cli_groups() -> Iterable[CliGroup]:
    from omni_duplex.cli import app

    return [CliGroup("duplex", app, "Full-duplex speech sessions (omni-duplex).")]


@hookimpl
def omni_register_server_routes() -> Iterable[ServerRoute]:
    from omni_duplex.server import mount

    return [ServerRoute("duplex-realtime", mount, "OpenAI-Realtime-style WebSocket /v1/realtime")]


def _bench_duplex(quick: bool) -> Any:
    from omni_duplex.bench import bench_duplex

    return bench_duplex(quick)


@hookimpl
def omni_register_benchmarks() -> Iterable[Benchmark]:
    return [
        Benchmark(
            "duplex", _bench_duplex, "tiny-omni-duplex: barge-in latency, commit → first audio"
        )
    ]
