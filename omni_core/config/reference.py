"""docs/pipelines.md, the pipeline file reference, rendered from code.

Run ``python -m omni_core.config.reference > docs/pipelines.md`` after changing a pipeline model,
a built-in stage kind's ``engine_args``, :class:`~omni_core.sampling.SamplingParams`, a built-in
bridge or engine kind; a test fails while the file differs from this output.

Everything comes from the JSON Schema of :mod:`omni_core.config.schema` (types, ranges, enums,
descriptions), the models' defaults, and the docstrings and registrations of the core's built-in
plugins. Only those: the output does not depend on which plugin packages are installed or on
``OMNI_DISABLE_PLUGINS``, so it is the same on every machine. A plugin's own sections and kinds
are in ``omni config schema`` (everything installed) and in the plugin's documentation.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Iterable
from importlib import resources
from typing import Any

from pydantic import BaseModel

from omni_core.config.pipeline import InputEdge, PipelineConfig, StageConfig
from omni_core.config.schema import INTERNAL_FIELDS, build_schema
from omni_core.config.settings import OmniSettings
from omni_core.plugin.hooks import PluginHost

REGENERATE = ".venv/bin/python -m omni_core.config.reference > docs/pipelines.md"
EXAMPLE_PIPELINE = "tiny-omni"
# A bound this large says "any finite number": not worth a line of the reference.
_HUGE = 2**62

_RST_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_RST_LITERAL = re.compile(r"``([^`]+)``")


def core_host() -> PluginHost:
    """A plugin host with the core's built-in plugins only (no entry points, none disabled)."""
    settings = OmniSettings(disable_plugins=[], testing_kit=True)  # the testing kit documented
    return PluginHost.create(settings, load_entry_points=False)


def rst_to_markdown(text: str) -> str:
    """A docstring's reST inline markup as Markdown: ``x`` and :class:`~a.B` become `x`, `B`."""

    def role(match: re.Match[str]) -> str:
        target = match.group(2)
        return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"

    return _RST_LITERAL.sub(r"`\1`", _RST_ROLE.sub(role, text))


def doc_of(obj: Any) -> str:
    """``obj``'s own docstring (not an inherited one), dedented, as Markdown; "" if none."""
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return rst_to_markdown(inspect.cleandoc(own)) if own else ""


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


class _Renderer:
    def __init__(self, host: PluginHost) -> None:
        self.kinds = host.stage_kinds()
        self.providers = host.stage_kind_providers()
        self.bridges = host.bridges()
        self.engines = host.engine_kinds()
        self.sections = host.config_sections()
        self.plugins = sorted(host.pm.plugin_info)
        self.schema = build_schema(
            kinds=self.kinds, sections=self.sections, engines=self.engines, bridges=self.bridges
        )
        self.defs: dict[str, Any] = self.schema["$defs"]
        self.anchors: dict[str, str] = {}  # $defs name -> heading anchor
        self.lines: list[str] = []

    # --- output -------------------------------------------------------------------------------
    def out(self, *lines: str) -> None:
        self.lines.extend(lines)

    def heading(self, level: int, text: str, def_name: str | None = None) -> None:
        if def_name is not None:
            self.anchors[def_name] = slug(text)
        self.out(f"{'#' * level} {text}", "")

    def paragraph(self, text: str) -> None:
        if text:
            self.out(text, "")

    def fields(
        self, schema: dict[str, Any], model: type[BaseModel] | None, skip: Iterable[str] = ()
    ) -> None:
        required = set(schema.get("required", ()))
        props = {k: v for k, v in schema.get("properties", {}).items() if k not in skip}
        described = any(prop.get("description") for prop in props.values())
        columns = ["field", "type", "default"] + (["description"] if described else [])
        self.out(_row(columns), _row(["---"] * len(columns)))
        for name, prop in props.items():
            default = "required" if name in required else self.default(name, prop, model)
            cells = [f"`{name}`", self.type_text(prop), default]
            if described:
                cells.append(" ".join(prop.get("description", "").split()).replace("|", "\\|"))
            self.out(_row(cells))
        self.out("")

    # --- values -------------------------------------------------------------------------------
    def default(self, name: str, prop: dict[str, Any], model: type[BaseModel] | None) -> str:
        if "default" in prop:
            return f"`{_yaml(prop['default'])}`"
        if model is not None and name in model.model_fields:
            value = model.model_fields[name].get_default(call_default_factory=True)
            if isinstance(value, BaseModel):
                return "all defaults"
            return f"`{_yaml(value)}`"
        return ""

    def type_text(self, prop: dict[str, Any]) -> str:
        if "$ref" in prop:
            name = prop["$ref"].rsplit("/", 1)[-1]
            anchor = self.anchors.get(name)
            return f"[{name}](#{anchor})" if anchor else f"`{name}`"
        if "const" in prop:
            return f"`{_yaml(prop['const'])}`"
        if "enum" in prop:
            values = ", ".join(f"`{_yaml(v)}`" for v in prop["enum"])
            return values if len(prop["enum"]) == 1 else f"one of {values}"
        if "anyOf" in prop:
            options = [self.type_text(p) for p in prop["anyOf"] if p.get("type") != "null"]
            nullable = any(p.get("type") == "null" for p in prop["anyOf"])
            return " or ".join(options) + (" or `null`" if nullable else "")
        kind = str(prop.get("type", "any"))
        if kind == "array":
            text = f"list of {self.type_text(prop.get('items', {}))}"
        elif kind == "object":
            extra = prop.get("additionalProperties")
            text = f"mapping of {self.type_text(extra)}" if isinstance(extra, dict) else "mapping"
        else:
            text = kind
        bounds = _bounds(prop)
        return f"{text} ({bounds})" if bounds else text

    # --- sections -----------------------------------------------------------------------------
    def render(self) -> str:
        # Anchors first, so that any table may link to a later section.
        for def_name, heading in (
            ("StageConfig", "Stage fields"),
            ("InputEdge", "Inputs"),
            ("RestartPolicy", "restart"),
            ("StageResources", "resources"),
            ("SamplingParams", "sampling_params"),
        ):
            self.anchors[def_name] = slug(heading)
        for name in sorted(self.kinds):
            self.anchors[self._def_name(self.kinds[name].config_model)] = slug(f"kind: {name}")
        self.intro()
        self.pipeline()
        self.stages()
        self.inputs()
        self.final_output_type()
        self.model_section("restart", "RestartPolicy", StageConfig)
        self.model_section("resources", "StageResources", StageConfig)
        self.sampling_params()
        self.bridges_section()
        self.engine_kinds()
        self.stage_kinds()
        self.plugin_sections()
        return "\n".join(self.lines).rstrip() + "\n"

    def _def_name(self, model: type[BaseModel]) -> str:
        for name, schema in self.defs.items():
            if schema.get("title") == model.__name__ and name.endswith(model.__name__):
                return name
        raise KeyError(model.__name__)  # pragma: no cover - every model has a definition

    def intro(self) -> None:
        self.heading(1, "Pipeline file reference")
        self.out(
            "<!-- Generated by omni_core/config/reference.py: do not edit. Regenerate with",
            f"     {REGENERATE} -->",
            "",
        )
        self.paragraph(
            "A pipeline file is YAML: the top-level fields below, a list of `stages`, and the "
            "sections that plugins register. `omni config validate FILE` checks a file against "
            "the installed plugins; `omni config schema` prints its JSON Schema (for editors "
            "and CI), built from the same models as this page."
        )
        self.paragraph(
            "This page is generated from the code (`omni_core/config/reference.py`) and covers "
            f"the core and its built-in plugins ({', '.join(f'`{p}`' for p in self.plugins)}) "
            "only, so it is the same "
            "wherever it is generated. Sections and stage kinds of plugin packages are in "
            "`omni config schema` (every installed plugin) and in each plugin's own "
            "documentation."
        )
        text = resources.files("omni_core.pipelines").joinpath(f"{EXAMPLE_PIPELINE}.yaml")
        self.paragraph(f"The built-in `{EXAMPLE_PIPELINE}` pipeline:")
        self.out("```yaml", text.read_text().rstrip(), "```", "")

    def pipeline(self) -> None:
        self.heading(2, "Pipeline fields")
        self.paragraph(doc_of(PipelineConfig))
        root = {k: v for k, v in self.schema.items() if k in ("properties", "required")}
        root["properties"] = {
            k: v for k, v in root["properties"].items() if k in PipelineConfig.model_fields
        }
        self.fields(root, PipelineConfig, skip=INTERNAL_FIELDS)
        self.paragraph(
            "Any other top-level key must be a section registered by an installed plugin "
            "(see [Plugin sections](#plugin-sections))."
        )

    def stages(self) -> None:
        self.heading(2, "Stage fields")
        self.paragraph("Each entry of `stages`:")
        self.fields(self.defs["StageConfig"], StageConfig)

    def inputs(self) -> None:
        self.heading(2, "Inputs")
        self.paragraph(doc_of(InputEdge))
        self.paragraph("`inputs` lists edges in one of two forms, mixed freely:")
        self.out(
            "- a stage id: `inputs: [0, 1]` is `inputs: [{stage: 0}, {stage: 1}]` (`on_finish` "
            "edges with the defaults below);",
            "- a mapping: `inputs: [{stage: 0, mode: stream, chunk: 8}]`.",
            "",
        )
        edge = self.defs["InputEdge"]
        self.fields(edge, InputEdge)
        self.heading(3, "Edge modes")
        mode = edge["properties"]["mode"]
        notes = _value_notes(mode.get("description", ""))
        self.out(*(f"- `{v}`: {notes.get(v, '')}".rstrip(": ") for v in mode["enum"]), "")

    def final_output_type(self) -> None:
        self.heading(2, "final_output_type")
        prop = self.defs["StageConfig"]["properties"]["final_output_type"]
        self.paragraph("Values: " + ", ".join(f"`{v}`" for v in prop["enum"]) + ".")
        text = prop.get("description", "")
        self.paragraph(text[:1].upper() + text[1:] + ".")

    def model_section(self, heading: str, def_name: str, owner: type[BaseModel]) -> None:
        self.heading(2, heading)
        field = owner.model_fields[heading]
        model = field.annotation if isinstance(field.annotation, type) else None
        self.paragraph(doc_of(model) if model else "")
        self.fields(self.defs[def_name], model)

    def sampling_params(self) -> None:
        from omni_core.sampling import SamplingParams

        self.heading(2, "sampling_params")
        self.paragraph(
            "A stage's default sampling parameters; a request's own are merged over them."
        )
        self.paragraph(doc_of(SamplingParams))
        self.fields(self.defs["SamplingParams"], None)

    def bridges_section(self) -> None:
        from omni_core.config.resolve import _resolve_bridge

        default = _resolve_bridge(None, {})
        self.heading(2, "Bridges")
        self.paragraph(
            "A bridge turns the results of a stage's `inputs` into the stage's input. `bridge:` "
            "names a registered bridge or a callable by dotted path (`pkg.mod:func`, called as "
            "`func(sources, original_prompt, params)`); a bridge returning `None` skips the stage."
        )
        self.heading(3, "Default bridge")
        self.paragraph(f"Without `bridge:`, `{default.__name__}`: " + doc_of(default))
        self.heading(3, "Built-in bridges")
        self.out("| bridge | description | behaviour |", "|---|---|---|")
        for name in sorted(self.bridges):
            bridge = self.bridges[name]
            behaviour = " ".join(doc_of(bridge.func).split())
            self.out(f"| `{name}` | {bridge.description} | {behaviour} |")
        self.out("")

    def engine_kinds(self) -> None:
        self.heading(2, "Engine kinds")
        self.paragraph("`engine:` selects the engine class that runs the pipeline.")
        self.out("| engine | description |", "|---|---|")
        for name in sorted(self.engines):
            self.out(f"| `{name}` | {self.engines[name].description} |")
        self.out("")

    def stage_kinds(self) -> None:
        self.heading(2, "Stage kinds")
        self.paragraph(
            "`kind:` selects the engine of a stage; `engine_args` are checked by the kind's "
            "model. Output mode `ar`: outputs token by token (an abort keeps the prefix); "
            "`whole`: one result (an abort retries the whole sample)."
        )
        self.out(_row(["kind", "plugin", "output mode", "description"]), _row(["---"] * 4))
        for name in sorted(self.kinds):
            kind = self.kinds[name]
            link = f"[`{name}`](#{slug(f'kind: {name}')})"
            self.out(_row([link, f"`{self.providers[name]}`", kind.output_mode, kind.description]))
        self.out("")
        for name in sorted(self.kinds):
            model = self.kinds[name].config_model
            self.heading(3, f"kind: {name}")
            self.paragraph(doc_of(sys.modules[model.__module__]))
            self.paragraph(doc_of(model) or "`engine_args`:")
            self.fields(self.defs[self._def_name(model)], model)

    def plugin_sections(self) -> None:
        self.heading(2, "Plugin sections")
        self.paragraph(
            "A plugin registers top-level sections with `omni_register_config_sections` "
            "(docs/hooks.md); a section is validated by the plugin's model, and `null` or an "
            "empty section takes the model's defaults."
        )
        if not self.sections:
            self.paragraph("The built-in plugins register none.")
        for name in sorted(self.sections):
            section = self.sections[name]
            self.heading(3, f"section: {name}")
            self.paragraph(section.description)
            self.fields(self.defs[self._def_name(section.model)], section.model)


def _bounds(prop: dict[str, Any]) -> str:
    parts = []
    for key, sign in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if key in prop and abs(prop[key]) < _HUGE:
            parts.append(f"{sign} {_yaml(prop[key])}")
    if "pattern" in prop:
        parts.append(f"matching `{prop['pattern']}`")
    if prop.get("minLength") == 1:
        parts.append("not empty")
    elif "minLength" in prop:
        parts.append(f"at least {prop['minLength']} characters")
    if prop.get("minItems") == 1:
        parts.append("at least one")
    elif "minItems" in prop:
        parts.append(f"at least {prop['minItems']}")
    if "maxItems" in prop:
        parts.append(f"at most {prop['maxItems']}")
    return ", ".join(parts)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _value_notes(description: str) -> dict[str, str]:
    """``"`a`: x; `b`: y"`` (how a field's description explains its values) as ``{a: x, b: y}``."""
    notes = {}
    for part in re.split(r";\s+(?=`)", description):
        match = re.match(r"`([^`]+)`: (.*)", part, re.DOTALL)
        if match:
            notes[match.group(1)] = match.group(2)
    return notes


def _yaml(value: Any) -> str:
    """A value as it is written in a pipeline file (flow style)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", value):
        if value not in ("null", "true", "false", "no", "yes", "on", "off"):
            return value
    return json.dumps(value)


def render_reference(host: PluginHost | None = None) -> str:
    """docs/pipelines.md for ``host`` (default: the core's built-in plugins only)."""
    return _Renderer(host or core_host()).render()


def main() -> None:
    sys.stdout.write(render_reference())


if __name__ == "__main__":
    main()
