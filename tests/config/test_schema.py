"""The pipeline file's JSON Schema: shipped pipelines validate, wrong fields fail where they are."""

from __future__ import annotations

import copy
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.config.schema import pipeline_schema
from omni_core.config.settings import OmniSettings
from omni_core.errors import ConfigError, PluginError
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import ConfigSection

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    [
        *ROOT.glob("omni_core/pipelines/*.yaml"),
        *ROOT.glob("examples/*.yaml"),
        *ROOT.glob("plugins/*/src/*/pipelines/*.yaml"),
    ]
)
CHAIN = yaml.safe_load((ROOT / "examples" / "scripted-chain.yaml").read_text())


class DemoSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    level: int = Field(default=1, ge=0, description="how loud")


def section_plugin(name: str, model: type[BaseModel]) -> types.ModuleType:
    module = types.ModuleType(f"fake_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_config_sections():
        return [ConfigSection(name, model, f"the {name} section")]

    module.omni_register_config_sections = omni_register_config_sections
    return module


def core_host(*plugins: tuple[str, Any]) -> PluginHost:
    settings = OmniSettings(disable_plugins=[])
    return PluginHost.create(settings, load_entry_points=False, extra_plugins=plugins)


def validator(host: PluginHost) -> Any:
    schema = pipeline_schema(host)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def installed() -> tuple[PluginHost, Any]:
    host = PluginHost.create(OmniSettings(disable_plugins=[]))  # entry points too
    return host, validator(host)


@pytest.fixture(scope="module")
def core() -> tuple[PluginHost, Any]:
    host = core_host()
    return host, validator(host)


def leaf_paths(validator: Any, data: Any) -> list[list[Any]]:
    """Where each error is, descending into anyOf/if-then branches to the field that failed."""
    paths = []
    for error in validator.iter_errors(data):
        best = jsonschema.exceptions.best_match([error])
        paths.append(list(best.absolute_path))
    return paths


def test_shipped_pipelines_exist_in_both_inputs_forms():
    assert len(SHIPPED) >= 3
    edges = [
        e
        for path in SHIPPED
        for s in yaml.safe_load(path.read_text())["stages"]
        for e in s.get("inputs", [])
    ]
    assert any(isinstance(e, int) for e in edges) and any(isinstance(e, dict) for e in edges)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_pipeline_validates(path, installed):
    host, check = installed
    data = yaml.safe_load(path.read_text())
    missing = [p for p in data.get("requires_plugins", []) if host.pm.get_plugin(p) is None]
    if missing:
        pytest.skip(f"plugins not installed: {missing}")
    assert [e.message for e in check.iter_errors(data)] == []


def mutate(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(CHAIN)
    change(data)
    return data


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
        target[path[-1]] = value

    return change


def _no_final(data: dict[str, Any]) -> None:
    for stage in data["stages"]:
        stage.pop("final_output", None)


def _vllm_without_args(data: dict[str, Any]) -> None:
    data["stages"][0]["kind"] = "vllm"
    del data["stages"][0]["engine_args"]


BAD = {
    "stage field type": (_set(["stages", 1, "replicas"], "two"), ["stages", 1, "replicas"]),
    "kind's engine_args type": (
        _set(["stages", 0, "engine_args", "num_tokens"], "four"),
        ["stages", 0, "engine_args", "num_tokens"],
    ),
    "unknown engine_args field": (
        _set(["stages", 2, "engine_args", "num_token"], 3),
        ["stages", 2, "engine_args"],
    ),
    "edge mode": (
        _set(["stages", 1, "inputs"], [{"stage": 0, "mode": "sideways"}]),
        ["stages", 1, "inputs", 0, "mode"],
    ),
    "edge as a string": (_set(["stages", 1, "inputs"], ["0"]), ["stages", 1, "inputs", 0]),
    "unknown kind": (_set(["stages", 0, "kind"], "nope"), ["stages", 0, "kind"]),
    "unknown bridge": (_set(["stages", 1, "bridge"], "nope"), ["stages", 1, "bridge"]),
    "sampling_params type": (
        _set(["stages", 0, "sampling_params", "temperature"], "hot"),
        ["stages", 0, "sampling_params", "temperature"],
    ),
    "bare no": (
        _set(["stages", 0, "restart", "policy"], False),
        ["stages", 0, "restart", "policy"],
    ),
    "final_output_type": (
        _set(["stages", 0, "final_output_type"], "video"),
        ["stages", 0, "final_output_type"],
    ),
    "unregistered section": (_set(["colour"], {"red": 1}), []),
    "unknown engine": (_set(["engine"], "duplexx"), ["engine"]),
    "no final stage": (_no_final, ["stages"]),
    "required engine_args": (_vllm_without_args, ["stages", 0]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_wrong_field_fails_the_schema_and_the_loader_where_it_is(case, core):
    host, check = core
    change, where = BAD[case]
    data = mutate(change)
    paths = leaf_paths(check, data)
    assert where in paths and all(p[: len(where)] == where for p in paths), paths
    with pytest.raises(ConfigError):  # the schema never rejects what the loader accepts
        resolve_pipeline(PipelineConfig.from_dict(data), host)


def test_inputs_in_both_forms_and_a_null_bridge_are_valid(core):
    _, check = core
    data = mutate(_set(["stages", 2, "inputs"], [1, {"stage": 0, "mode": "on_finish"}]))
    data["stages"][1]["bridge"] = None
    data["stages"][2]["bridge"] = "pkg.mod:func"  # a dotted path: the loader imports it
    assert leaf_paths(check, data) == []


def test_plugin_section_is_a_property_checked_by_its_model():
    check = validator(core_host(("demo", section_plugin("demo", DemoSection))))
    assert check.schema["properties"]["demo"]["description"] == "the demo section"
    assert leaf_paths(check, {**CHAIN, "demo": None}) == []
    assert leaf_paths(check, {**CHAIN, "demo": {"level": 3}}) == []
    assert leaf_paths(check, {**CHAIN, "demo": {"level": -1}}) == [["demo", "level"]]
    assert leaf_paths(check, {**CHAIN, "demo": {"volume": 1}}) == [["demo"]]


def test_without_the_plugin_its_section_is_an_error(core):
    _, check = core
    assert "demo" not in check.schema["properties"]
    assert leaf_paths(check, {**CHAIN, "demo": {}}) == [[]]


def test_loader_internals_are_not_in_the_schema(core):
    _, check = core
    assert "source" not in check.schema["properties"]
    assert leaf_paths(check, {**CHAIN, "source": "x.yaml"}) == [[]]


def test_same_registrations_give_the_same_text():
    assert json.dumps(pipeline_schema(core_host())) == json.dumps(pipeline_schema(core_host()))


def test_model_without_a_json_schema_names_who_registered_it():
    class Hook(BaseModel):
        call: Callable[[], int] = print  # pydantic validates it; JSON Schema cannot say it

    with pytest.raises(PluginError, match="config section 'hooky': Hook has no JSON Schema"):
        pipeline_schema(core_host(("hooky", section_plugin("hooky", Hook))))
