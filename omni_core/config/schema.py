"""The pipeline file's JSON Schema (``omni config schema``), generated from the models.

The schema is built from :class:`~omni_core.config.pipeline.PipelineConfig` and what the plugin
host registered: every stage kind's ``engine_args`` model (selected by ``kind`` with
``if``/``then``, so a validator reports the field of the kind's own model), every config section's
model (an optional top-level property), the engine kinds and bridge names. ``sampling_params``
comes from :class:`~omni_core.sampling.SamplingParams` (a msgspec struct).

It checks what a schema can say (fields, types, ranges, enums); the loader checks the rest: unique
ids, edges to existing stages, cycles, importable callables, a kind's own validators.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from pydantic import BaseModel, PydanticUserError
from pydantic.json_schema import models_json_schema

from omni_core.config.pipeline import InputEdge, PipelineConfig, StageConfig
from omni_core.errors import PluginError
from omni_core.sampling import SamplingParams

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost
    from omni_core.plugin.types import ConfigSection, StageKind

DIALECT = "https://json-schema.org/draft/2020-12/schema"
REF = "#/$defs/{model}"
# Fields of the models that are not part of the file (set by the loader).
INTERNAL_FIELDS = ("source",)


def pipeline_schema(host: PluginHost) -> dict[str, Any]:
    """The JSON Schema of a pipeline file for what ``host`` registered."""
    return build_schema(
        kinds=host.stage_kinds(),
        sections=host.config_sections(),
        engines=host.engine_kinds(),
        bridges=host.bridges(),
    )


def build_schema(
    *,
    kinds: Mapping[str, StageKind],
    sections: Mapping[str, ConfigSection],
    engines: Iterable[str],
    bridges: Iterable[str],
) -> dict[str, Any]:
    """The schema for these registrations (names sorted: the same input gives the same text)."""
    kind_names, section_names = sorted(kinds), sorted(sections)
    owners: dict[type[BaseModel], str] = {
        m: "the pipeline models" for m in (PipelineConfig, StageConfig, InputEdge)
    }
    for name in kind_names:
        owners.setdefault(kinds[name].config_model, f"stage kind '{name}' (engine_args)")
    for name in section_names:
        owners.setdefault(sections[name].model, f"config section '{name}'")
    refs, top = _models_schema(owners)
    defs: dict[str, Any] = top["$defs"]

    def ref(model: type[BaseModel]) -> str:
        return str(refs[(model, "validation")]["$ref"])

    def definition(model: type[BaseModel]) -> dict[str, Any]:
        return defs[ref(model).rsplit("/", 1)[-1]]

    _, sampling_defs = msgspec.json.schema_components(
        [SamplingParams], ref_template="#/$defs/{name}"
    )
    clash = sorted(set(sampling_defs) & set(defs))
    if clash:
        raise PluginError(f"JSON Schema: a plugin model is named like {clash[0]} of the core")
    defs.update(sampling_defs)

    stage = definition(StageConfig)
    props = stage["properties"]
    props["kind"]["enum"] = kind_names
    props["inputs"]["items"] = {
        "anyOf": [
            {"type": "integer", "description": "an upstream stage id (an `on_finish` edge)"},
            {"$ref": ref(InputEdge)},
        ]
    }
    props["bridge"]["anyOf"] = [
        {"type": "string", "enum": sorted(bridges)},
        {"type": "string", "pattern": "[.:]", "description": "a dotted path to a callable"},
        {"type": "null"},
    ]
    props["sampling_params"] = {
        "$ref": REF.format(model=SamplingParams.__name__),
        "description": props["sampling_params"].get("description", ""),
    }
    stage["allOf"] = [_engine_args_rule(name, kinds[name].config_model, ref) for name in kind_names]

    root = definition(PipelineConfig)
    del defs[ref(PipelineConfig).rsplit("/", 1)[-1]]
    for field in INTERNAL_FIELDS:
        root["properties"].pop(field, None)
    root["properties"]["engine"]["enum"] = sorted(engines)
    stages = root["properties"]["stages"]
    stages["minItems"] = 1
    stages["contains"] = {
        "properties": {"final_output": {"const": True}},
        "required": ["final_output"],
    }
    for name in section_names:
        if name in root["properties"]:
            continue  # a section named like a core field is never read as a section
        section = sections[name]
        root["properties"][name] = {
            "anyOf": [{"$ref": ref(section.model)}, {"type": "null"}],
            "description": section.description or f"the '{name}' plugin section",
        }
    root["additionalProperties"] = False  # an unregistered section is an error
    root["title"] = "omni-core pipeline file"
    return {"$schema": DIALECT, **root, "$defs": dict(sorted(defs.items()))}


def _models_schema(owners: dict[type[BaseModel], str]) -> tuple[Any, dict[str, Any]]:
    """One schema for all models (shared ``$defs``); a model pydantic cannot express is an
    error naming who registered it."""
    try:
        return models_json_schema([(m, "validation") for m in owners], ref_template=REF)
    except PydanticUserError as exc:
        for model, owner in owners.items():
            try:
                model.model_json_schema()
            except PydanticUserError as own:
                raise PluginError(
                    f"{owner}: {model.__name__} has no JSON Schema: {own.message}"
                ) from own
        raise PluginError(f"no JSON Schema for the pipeline: {exc.message}") from exc


def _engine_args_rule(kind: str, model: type[BaseModel], ref: Any) -> dict[str, Any]:
    then: dict[str, Any] = {"properties": {"engine_args": {"$ref": ref(model)}}}
    if any(field.is_required() for field in model.model_fields.values()):
        then["required"] = ["engine_args"]
    return {
        "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
        "then": then,
    }
