"""A stage's ``engine_args.env`` reaches its process: over the pinned-thread variables, with a
PYTHONPATH prepended to the inherited one (the stage process still imports what ours does), a
``{package:NAME}`` placeholder expanded where the replica starts."""

from __future__ import annotations

import os

import pytest
import yaml

import omni_core
from omni_core.config.pipeline import PipelineConfig
from omni_core.errors import ConfigError
from omni_core.kinds.vllm_kind import VllmArgs, make_vllm_client, process_env
from omni_core.stage.client import StageContext


def test_pythonpath_is_prepended_and_other_variables_override(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/inherited/a")
    env = process_env(2, {"PYTHONPATH": "/shim", "OMP_NUM_THREADS": "3", "MY_FLAG": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join(["/shim", "/inherited/a"])
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["MY_FLAG"]) == ("3", "2", "1")
    monkeypatch.delenv("PYTHONPATH")
    assert process_env(1, {"PYTHONPATH": "/shim"})["PYTHONPATH"] == "/shim"
    assert "PYTHONPATH" not in process_env(1)


def test_a_package_placeholder_becomes_the_installed_package_directory():
    # a pipeline names a plugin's files portably; the path is found where the replica starts
    here = os.path.dirname(omni_core.__file__)
    env = process_env(1, {"PYTHONPATH": "{package:omni_core}/pipelines", "X": "a{package:yaml}b"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == f"{here}/pipelines"
    assert env["X"] == f"a{os.path.dirname(yaml.__file__)}b"
    with pytest.raises(ConfigError, match=r"\{package:no_such_pkg_x\}': no installed package"):
        process_env(1, {"PYTHONPATH": "{package:no_such_pkg_x}/shim"})


def test_vllm_stage_env_goes_into_its_process_client(
    monkeypatch, omni_settings, plugin_host, tmp_path
):
    monkeypatch.setenv("PYTHONPATH", "/inherited")
    config = PipelineConfig.from_dict(
        {
            "name": "p",
            "stages": [
                {
                    "id": 0,
                    "name": "thinker",
                    "kind": "vllm",
                    "engine_args": {"model": str(tmp_path), "env": {"PYTHONPATH": "/shim"}},
                    "final_output": True,
                }
            ],
        }
    )
    settings = omni_settings.model_copy(update={"cache_dir": tmp_path})
    client = make_vllm_client(config.stages[0], 0, StageContext.bound("p", settings, plugin_host))
    spec = client.worker_spec()  # what the process (or a Ray actor) is started with
    assert spec["env"]["PYTHONPATH"] == os.pathsep.join(["/shim", "/inherited"])
    assert spec["env"]["OMP_NUM_THREADS"] == "1"
    assert "env" in spec["config"]["args"]  # engine_args stay whole; the worker ignores it


def test_env_values_must_be_strings():
    with pytest.raises(ValueError, match="env"):
        VllmArgs.model_validate({"model": "m", "env": {"X": {"nested": 1}}})
