"""Checks a pipeline against what plugins registered and binds kinds, args and bridges."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from omni_core.config.pipeline import PipelineConfig, StageConfig
from omni_core.errors import ConfigError
from omni_core.plugin.types import StageKind

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost


@dataclass(frozen=True)
class ResolvedStage:
    config: StageConfig
    kind: StageKind
    args: BaseModel
    bridge: Callable[..., Any]
    output_mode: str  # "ar" or "whole"

    @property
    def id(self) -> int:
        return self.config.id

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class ResolvedPipeline:
    config: PipelineConfig
    stages: dict[int, ResolvedStage]
    sections: dict[str, BaseModel]
    engine_class: type[Any]


def load_pipeline(pipeline: str | Path | PipelineConfig, host: PluginHost) -> PipelineConfig:
    """A PipelineConfig from a config, a YAML path, or a registered pipeline name."""
    if isinstance(pipeline, PipelineConfig):
        return pipeline
    text = str(pipeline)
    named = host.pipelines()
    if text in named and not Path(text).exists():
        return named[text].load()
    if text.endswith((".yaml", ".yml")) or Path(text).exists():
        return PipelineConfig.from_yaml(text)
    known = ", ".join(sorted(named)) or "none"
    raise ConfigError(
        [f"{text}: not a pipeline file and not a registered pipeline (registered: {known})"]
    )


def resolve_pipeline(pipeline: str | Path | PipelineConfig, host: PluginHost) -> ResolvedPipeline:
    config = load_pipeline(pipeline, host)
    problems: list[str] = []
    src = config.source
    for required in config.requires_plugins:
        if host.pm.get_plugin(required) is None:
            problems.append(
                f"{src}: field 'requires_plugins': plugin '{required}' is not installed or disabled"
            )
    kinds = host.stage_kinds()
    bridges = host.bridges()
    engine_kinds = host.engine_kinds()
    engine_class: type[Any] | None = None
    if config.engine in engine_kinds:
        engine_class = engine_kinds[config.engine].engine_class
    else:
        problems.append(
            f"{src}: field 'engine': unknown engine kind '{config.engine}' "
            f"(registered: {', '.join(sorted(engine_kinds)) or 'none'})"
        )
    sections: dict[str, BaseModel] = {}
    registered_sections = host.config_sections()
    for key, value in config.sections.items():
        section = registered_sections.get(key)
        if section is None:
            problems.append(f"{src}: field '{key}': unknown field")
            continue
        try:
            sections[key] = section.model.model_validate(value or {}, context={"pipeline": config})
        except ValidationError as exc:
            problems.extend(_model_problems(exc, f"{src}: section '{key}'", prefix=""))
    stages: dict[int, ResolvedStage] = {}
    for stage in config.stages:
        label = config.stage_label(stage)
        kind = kinds.get(stage.kind)
        if kind is None:
            problems.append(
                f"{label}: field 'kind': unknown stage kind '{stage.kind}' "
                f"(registered: {', '.join(sorted(kinds)) or 'none'})"
            )
            continue
        try:
            args = kind.config_model.model_validate(stage.engine_args)
        except ValidationError as exc:
            problems.extend(_model_problems(exc, label, prefix="engine_args."))
            continue
        try:
            bridge = _resolve_bridge(stage.bridge, bridges)
        except ConfigError as exc:
            problems.extend(f"{label}: field 'bridge': {p}" for p in exc.problems)
            continue
        output_mode = getattr(args, "output", None) or kind.output_mode
        stages[stage.id] = ResolvedStage(stage, kind, args, bridge, output_mode)
    if problems:
        raise ConfigError(problems)
    assert engine_class is not None
    return ResolvedPipeline(config, stages, sections, engine_class)


def _resolve_bridge(name: str | None, bridges: dict[str, Any]) -> Callable[..., Any]:
    if name is None:
        from omni_core.stage.bridges import default_bridge

        return default_bridge
    if name in bridges:
        return bridges[name].func  # type: ignore[no-any-return,unused-ignore]
    if ":" in name or "." in name:
        module_name, _, attr = name.replace(":", ".").rpartition(".")
        try:
            func = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError([f"cannot import '{name}': {exc}"]) from None
        if not callable(func):
            raise ConfigError([f"'{name}' is not callable"])
        return func  # type: ignore[no-any-return,unused-ignore]
    known = ", ".join(sorted(bridges)) or "none"
    raise ConfigError([f"unknown bridge '{name}' (registered: {known}; or give a dotted path)"])


def _model_problems(exc: ValidationError, label: str, prefix: str) -> list[str]:
    out = []
    for err in exc.errors():
        field = prefix + ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        out.append(f"{label}: field '{field.rstrip('.')}': {msg}")
    return out
