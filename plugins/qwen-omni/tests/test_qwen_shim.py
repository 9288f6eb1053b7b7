"""The torchvision shim: what it fixes (in fresh processes, as vLLM's inspection subprocess is),
that it stays off where torchvision exists, and that the pipeline hands it to its vLLM stage."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from omni_qwen import compat

from omni_core.kinds.vllm_kind import expand_env
from omni_core.plugin.hooks import PluginHost

# What vLLM's model registry imports when it inspects Qwen2.5-Omni (in a subprocess).
IMPORT_VLLM_THINKER = (
    "import vllm.model_executor.models.qwen2_5_omni_thinker as m\n"
    "from transformers.models.qwen2_vl import Qwen2VLImageProcessor\n"
    "from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import "
    "Qwen2VLImageProcessorPil\n"
    "assert Qwen2VLImageProcessor is Qwen2VLImageProcessorPil\n"
    "print('ok', m.Qwen2_5OmniThinkerForConditionalGeneration.__name__)\n"
)


def run_python(code: str, pythonpath: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.skipif(not compat.needed(), reason="torchvision is installed: nothing to shim")
def test_vllm_qwen_omni_imports_only_with_the_shim_on_pythonpath():
    without = run_python(IMPORT_VLLM_THINKER, [])
    assert without.returncode != 0 and "torchvision" in without.stderr
    shimmed = run_python(IMPORT_VLLM_THINKER, [compat.pythonpath_entry()])
    assert shimmed.returncode == 0, shimmed.stderr[-2000:]
    assert "ok Qwen2_5OmniThinkerForConditionalGeneration" in shimmed.stdout


def test_the_shim_stays_off_where_torchvision_is_importable(tmp_path):
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text("")
    code = "from omni_qwen import compat\nprint(compat.installed())\n"
    with_tv = run_python(code, [compat.pythonpath_entry(), str(tmp_path)])
    assert with_tv.stdout.strip() == "False", with_tv.stderr
    if compat.needed():
        without_tv = run_python(code, [compat.pythonpath_entry()])
        assert without_tv.stdout.strip() == "True", without_tv.stderr


def test_thinker_pipeline_puts_the_shim_on_its_vllm_stage_pythonpath(omni_settings):
    host = PluginHost.create(omni_settings)
    config = host.pipelines()["qwen2.5-omni-thinker"].load()
    (stage,) = config.stages
    assert stage.kind == "vllm"
    args = stage.engine_args
    assert args["model"] == "tiny-qwen2.5-omni"
    assert args["engine"]["limit_mm_per_prompt"] == {"audio": 1, "image": 1, "video": 0}
    assert args["env"] == {"PYTHONPATH": compat.PORTABLE_PYTHONPATH}  # no machine path
    assert expand_env(args["env"]["PYTHONPATH"]) == compat.pythonpath_entry()  # found at run time
    # so the main pipeline's YAML (omni pipelines show) names no path of this machine
    for name in ("qwen2.5-omni", "qwen2.5-omni-duplex", "qwen2.5-omni-duplex-text"):
        text = yaml.safe_dump(host.pipeline_config(name).portable())
        assert str(compat.SHIM_DIR.parents[3]) not in text and "{package:omni_qwen}" in text
    assert (compat.SHIM_DIR / "sitecustomize.py").is_file()
