"""``omni config schema``: the JSON Schema of the installed plugins, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import omni

jsonschema = pytest.importorskip("jsonschema")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"


def schema(env: dict | None = None) -> dict:
    result = omni("config", "schema", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_prints_a_schema_that_checks_pipeline_files():
    printed = schema()
    check = jsonschema.Draft202012Validator(printed)
    data = yaml.safe_load(EXAMPLE.read_text())
    assert list(check.iter_errors(data)) == []
    data["stages"][0]["engine_args"]["delay_s"] = "soon"
    [error] = check.iter_errors(data)
    assert list(jsonschema.exceptions.best_match([error]).absolute_path) == [
        "stages",
        0,
        "engine_args",
        "delay_s",
    ]


@pytest.mark.slow
def test_follows_the_installed_and_enabled_plugins():
    stage_kinds = omni("stages").stdout
    full = schema()
    kinds = full["$defs"]["StageConfig"]["properties"]["kind"]["enum"]
    assert {"python", "scripted", "vllm"} <= set(kinds)
    assert all(kind in stage_kinds for kind in kinds)
    without = schema({"OMNI_DISABLE_PLUGINS": "testing"})
    assert "scripted" not in without["$defs"]["StageConfig"]["properties"]["kind"]["enum"]
    if "cfg" in full["properties"]:  # omni-cfg installed: its section goes with it
        assert "cfg" not in schema({"OMNI_DISABLE_PLUGINS": "cfg"})["properties"]
