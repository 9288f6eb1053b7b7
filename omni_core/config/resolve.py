"""Checks a pipeline against what plugins registered and binds kinds, args and bridges."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from omni_core.config.pipeline import PipelineConfig, StageConfig
from omni_core.errors import ConfigError, RequestError
from omni_core.plugin.types import StageKind
from omni_core.sampling import SamplingParams

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
    host: PluginHost  # the plugin host it was resolved against (its kinds resolve models so)


def load_pipeline(pipeline: str | Path | PipelineConfig, host: PluginHost) -> PipelineConfig:
    """A PipelineConfig from a config, a YAML path, or a registered pipeline name."""
    if isinstance(pipeline, PipelineConfig):
        return pipeline
    text = str(pipeline)
    named = host.pipelines()
    exists = is_existing_path(text)
    if text in named and not exists:
        return host.pipeline_config(text)
    if text.endswith((".yaml", ".yml")) or exists:
        return PipelineConfig.from_yaml(text)
    known = ", ".join(sorted(named)) or "none"
    problem = "not a pipeline file and not a registered pipeline"
    raise ConfigError([f"{shorten(text)}: {problem} (registered: {known})"])


def is_existing_path(text: str | Path) -> bool:
    """Whether ``text`` names an existing file system entry (a name too long for one: no)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def shorten(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters for an error line."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def resolve_pipeline(
    pipeline: str | Path | PipelineConfig, host: PluginHost, *, import_code: bool = True
) -> ResolvedPipeline:
    """Check ``pipeline`` against what plugins registered and bind its kinds, args and bridges.

    ``import_code=False`` (``omni config validate``): a module a config names (a dotted-path
    bridge; a kind's callable, through the validation context ``{"import_code": False}``) is
    located without executing any module (a config file does not run code when it is checked); a
    bridge is bound to an :class:`UnimportedBridge`. It is imported when the pipeline runs.
    """
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
            data = {} if value is None else value
            sections[key] = section.model.model_validate(data, context={"pipeline": config})
        except ValidationError as exc:
            problems.extend(_model_problems(exc, f"{src}: section '{key}'", prefix=""))
    stages: dict[int, ResolvedStage] = {}
    for stage in config.stages:
        label = config.stage_label(stage)
        try:  # as the engine does before it starts, so `config validate` reports it too
            SamplingParams.from_mapping(stage.sampling_params)
        except RequestError as exc:
            problems.append(f"{label}: {exc}")
        kind = kinds.get(stage.kind)
        if kind is None:
            problems.append(
                f"{label}: field 'kind': unknown stage kind '{stage.kind}' "
                f"(registered: {', '.join(sorted(kinds)) or 'none'})"
            )
            continue
        try:
            args = kind.config_model.model_validate(
                stage.engine_args, context={"import_code": import_code}
            )
        except ValidationError as exc:
            problems.extend(_model_problems(exc, label, prefix="engine_args."))
            continue
        bridge_name = stage.bridge if stage.bridge is not None else kind.bridge
        try:
            if import_code:
                bridge = _resolve_bridge(bridge_name, bridges)
            else:
                bridge = _check_bridge(bridge_name, bridges)
        except ConfigError as exc:
            declared = "" if stage.bridge is not None else f" (stage kind '{kind.name}' needs it)"
            problems.extend(f"{label}: field 'bridge': {p}{declared}" for p in exc.problems)
            continue
        output_mode = getattr(args, "output", None) or kind.output_mode
        stages[stage.id] = ResolvedStage(stage, kind, args, bridge, output_mode)
    problems.extend(_unbridgeable_inputs(config, stages))
    if problems:
        raise ConfigError(problems)
    assert engine_class is not None
    return ResolvedPipeline(config, stages, sections, engine_class, host)


def _unbridgeable_inputs(config: PipelineConfig, stages: dict[int, ResolvedStage]) -> list[str]:
    """A stage on the default bridge fed by a kind that produces neither tokens nor text (a
    vocoder's audio chunks): nothing could be forwarded, so it is a config error, not a skip."""
    from omni_core.stage.bridges import default_bridge

    problems: list[str] = []
    for stage in stages.values():
        if stage.bridge is not default_bridge:
            continue
        for edge in stage.config.inputs:
            upstream = stages.get(edge.stage)
            produces = set(upstream.kind.produces) if upstream is not None else set()
            if upstream is None or not produces or produces & {"tokens", "text"}:
                continue
            what = ", ".join(sorted(produces))
            hint = "`bridge: audio`" if "audio" in produces else "a bridge that reads them"
            problems.append(
                f"{config.stage_label(stage.config)}: field 'bridge': the default bridge "
                f"forwards token ids or text, but input stage '{upstream.name}' (kind "
                f"'{upstream.kind.name}') produces {what}: set {hint}"
            )
    return problems


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


@dataclass(frozen=True)
class UnimportedBridge:
    """A dotted-path bridge that was located but not imported (``omni config validate``)."""

    path: str

    def __call__(self, *args: Any) -> Any:
        raise ConfigError([f"bridge '{self.path}' was checked, not imported (validation only)"])


def _check_bridge(name: str | None, bridges: dict[str, Any]) -> Callable[..., Any]:
    """What :func:`_resolve_bridge` finds, without importing a dotted path's module: its module
    must be locatable (no module code runs), its attribute is checked when it is imported."""
    if name is None or name in bridges or (":" not in name and "." not in name):
        return _resolve_bridge(name, bridges)  # registered (or unknown): nothing is imported
    module_name, _, attr = name.replace(":", ".").rpartition(".")
    if not attr.isidentifier() or not all(p.isidentifier() for p in module_name.split(".")):
        raise ConfigError([f"'{name}' is not a registered bridge or a dotted path 'pkg.mod:func'"])
    if not module_locatable(module_name):
        raise ConfigError([f"cannot import '{name}': no module named '{module_name}'"])
    return UnimportedBridge(name)


def module_locatable(name: str) -> bool:
    """Whether module ``name`` can be found, asking the import system's finders only: unlike
    :func:`importlib.util.find_spec`, no parent package is imported, so no module code runs."""
    path: Any = None
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        full = ".".join(parts[:depth])
        module = sys.modules.get(full)
        if module is not None:
            locations = getattr(module, "__path__", None)
        else:
            spec = None
            for finder in sys.meta_path:
                find_spec = getattr(finder, "find_spec", None)
                if find_spec is None:
                    continue
                try:
                    spec = find_spec(full, path)
                except (ImportError, ValueError, OSError):
                    spec = None
                if spec is not None:
                    break
            if spec is None:
                return False
            locations = spec.submodule_search_locations
        if depth < len(parts):
            if locations is None:  # not a package: it has no submodules
                return False
            path = list(locations)
    return True


def _model_problems(exc: ValidationError, label: str, prefix: str) -> list[str]:
    out = []
    for err in exc.errors():
        field = prefix + ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        out.append(f"{label}: field '{field.rstrip('.')}': {msg}")
    return out
