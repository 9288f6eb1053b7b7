"""``omni run qwen-image`` as a user runs it (a subprocess): a PNG, guidance (omni-cfg's
``--negative-prompt`` / ``--guidance``) that changes it, bad input as exit 2 naming the flag or
field (a size the VAE refuses: test_qwen_image_pipeline)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def omni(*args: str, cache: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    full.update({"OMNI_CACHE_DIR": str(cache), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "omni_core.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def png_pixels(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


@pytest.mark.timeout(600)
def test_run_writes_the_png_and_the_negative_prompt_changes_it(qi_cache, tiny_qi, tmp_path):
    plain = omni(
        *("run", "qwen-image", "--prompt", "a red square", "--seed", "3", "--size", "32x32"),
        *("-o", str(tmp_path / "plain")),
        cache=qi_cache,
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    guided = omni(
        *("run", "qwen-image", "--prompt", "a red square", "--seed", "3"),
        *("--size", "32x32", "--negative-prompt", "blurry", "-o", str(tmp_path / "guided")),
        cache=qi_cache,
    )
    assert guided.returncode == 0, guided.stderr[-2000:]
    (a,) = (tmp_path / "plain").glob("*.png")
    (b,) = (tmp_path / "guided").glob("*.png")
    assert "image:" in plain.stdout and "(32x32)" in plain.stdout
    pa, pb = png_pixels(a), png_pixels(b)
    assert pa.shape == pb.shape == (32, 32, 3)
    assert np.abs(pa.astype(int) - pb.astype(int)).max() > 8
    assert "#cfg" not in guided.stdout  # the companion is in no caller-visible output


def test_bad_image_flags_exit_2_naming_them(qi_cache, tmp_path):
    out = omni("run", "qwen-image", "--size", "big", "-o", str(tmp_path), cache=qi_cache)
    assert out.returncode == 2 and "--size big" in out.stderr
    out = omni("run", "tiny-omni", "--steps", "3", "-o", str(tmp_path), cache=qi_cache)
    assert out.returncode == 2 and "--steps" in out.stderr and "produces no image" in out.stderr
    out = omni("run", "qwen-image", "--extra", "=1", "-o", str(tmp_path), cache=qi_cache)
    assert out.returncode == 2 and "--extra =1" in out.stderr
    out = omni("run", "qwen-image", "--prompt", "x", "--guidance", "-1", cache=qi_cache)
    assert out.returncode == 2 and "--guidance -1: the guidance scale must be" in out.stderr
    out = omni("run", "qwen-image", "--prompt", "x", "--guidance", "lots", cache=qi_cache)
    assert out.returncode == 2 and "--guidance lots:" in out.stderr


def test_help_lists_omni_cfgs_options_for_qwen_image(qi_cache):
    out = omni("run", "qwen-image", "--help", cache=qi_cache)
    assert out.returncode == 0, out.stderr
    assert "Options of pipeline 'qwen-image' (from its plugins):" in out.stdout
    assert "--negative-prompt TEXT" in out.stdout and "--guidance FLOAT" in out.stdout
    out = omni("run", "qwen-image", "--help", cache=qi_cache, env={"OMNI_DISABLE_PLUGINS": "cfg"})
    assert out.returncode == 0 and "takes no plugin options" in out.stdout


def test_guidance_without_omni_cfg_exits_2_naming_the_flag_or_field(qi_cache, tmp_path):
    without = {"OMNI_DISABLE_PLUGINS": "cfg"}
    out = omni(
        *("run", "qwen-image", "--prompt", "a red square", "-o", str(tmp_path)),
        *("--negative-prompt", "blurry"),
        cache=qi_cache,
        env=without,
    )
    assert out.returncode == 2 and not list(tmp_path.glob("*.png"))
    assert "--negative-prompt: no such option of omni run for pipeline 'qwen-image'" in out.stderr


@pytest.mark.timeout(600)
def test_guidance_through_extra_without_omni_cfg_is_a_400_naming_the_field(
    qi_cache, tiny_qi, tmp_path
):
    out = omni(
        *("run", "qwen-image", "--prompt", "a red square", "-o", str(tmp_path)),
        *("--extra", "cfg.negative_prompt=blurry"),
        cache=qi_cache,
        env={"OMNI_DISABLE_PLUGINS": "cfg"},
    )
    assert out.returncode == 2 and "extra['cfg']" in out.stderr and "omni-cfg" in out.stderr
