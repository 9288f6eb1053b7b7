"""Parity of the plugin's engines (run in this process, as a replica runs them) with diffusers'
``WanPipeline`` on the same tiny checkpoints: frames identical, unguided and guided, Wan 2.1 and
2.2 (its second guidance scale included); a perturbed input changes them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from omni_wan.plugin import committed_checksums

from omni_core.models import tree_hashes

SIZE, FRAMES, STEPS, SEED = 32, 5, 4, 7
TEXT = 32  # max_sequence_length, as the tiny pipelines (omni_wan.pipelines.wan_pipeline)


@pytest.fixture(scope="module")
def engines(tiny_wan: dict[str, Path]) -> dict[str, Any]:
    from omni_wan.encoder import EncoderEngine
    from omni_wan.engine import WanEngine

    args = {"steps": STEPS, "height": SIZE, "width": SIZE, "num_frames": FRAMES, "max_batch": 1}
    return {
        v: (
            EncoderEngine(
                {"model": str(path), "threads": 1, "options": {"max_sequence_length": TEXT}}
            ),
            WanEngine({"model": str(path), "args": args, "stage": "dit"}),
        )
        for v, path in tiny_wan.items()
    }


@pytest.fixture(scope="module")
def references(tiny_wan: dict[str, Path]) -> dict[str, Any]:
    """diffusers' ``WanPipeline`` built from the folder's parts (:mod:`omni_wan.load`: the
    weights laid out as the engines load them), the bitwise reference."""
    from omni_wan.load import pipeline

    return {v: pipeline(path) for v, path in tiny_wan.items()}


@pytest.fixture(scope="module")
def pretrained(tiny_wan: dict[str, Path]) -> dict[str, Any]:
    """diffusers' own ``WanPipeline.from_pretrained`` (needs accelerate: requirements/wan.txt).
    Its weights are equal to the parts' but laid out by accelerate's loader, which moves
    float results by ~1e-6: frames agree within one 8-bit level, not bitwise."""
    import torch
    from diffusers import WanPipeline

    def load(path: Path) -> Any:
        pipe = WanPipeline.from_pretrained(str(path), torch_dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    return {v: load(path) for v, path in tiny_wan.items()}


def request(rid: str, prompt: Any, **wan: Any) -> Any:
    return SimpleNamespace(
        request_id=rid, prompt=prompt, params=SimpleNamespace(seed=SEED, extra={"wan": wan})
    )


def embeds(encoder: Any, text: str) -> Any:
    encoder.add(request("e", text))
    (out,) = encoder.step()
    return out.hidden_states.layers["final"]


def generate(pair: Any, prompt: str, negative: str | None, scale: float, **wan: Any) -> Any:
    """The engines' frames: the prompt (and the negative prompt, as omni-cfg weights them)
    encoded, then denoised step by step until the video comes."""
    encoder, dit = pair
    own = embeds(encoder, prompt)
    if negative is None:
        conditioning: Any = {"prompt_embeds": own}
    else:
        neg = embeds(encoder, negative)
        conditioning = {
            "conditionings": [
                {"prompt_embeds": own, "weight": scale},
                {"prompt_embeds": neg, "weight": 1.0 - scale},
            ]
        }
    dit.add(request("r", conditioning, **wan))
    progress = []
    while True:
        (out,) = dit.step()
        assert out.error is None, out.error
        if out.finished:
            return dit.plane.take(out.payload.frames), progress
        progress.append(out.payload.step)


def reference(pipe: Any, prompt: str, negative: str | None, scale: float, **kw: Any) -> Any:
    import torch

    frames = pipe(
        prompt,
        negative_prompt=negative,
        height=SIZE,
        width=SIZE,
        num_frames=FRAMES,
        num_inference_steps=STEPS,
        guidance_scale=scale,
        generator=torch.Generator().manual_seed(SEED),
        output_type="np",
        max_sequence_length=TEXT,
        **kw,
    ).frames[0]
    return (frames * 255).round().clip(0, 255).astype("uint8")


def test_tiny_checkpoints_match_their_committed_checksums(tiny_wan):
    for version, path in tiny_wan.items():
        assert tree_hashes(path) == committed_checksums(version)
    index = json.loads((tiny_wan["2.2"] / "model_index.json").read_text())
    assert index["boundary_ratio"] == 0.875 and index["transformer_2"][0] == "diffusers"


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("guided", [False, True])
def test_frames_equal_wan_pipeline(engines, references, version, guided):
    negative, scale = ("blurry dark", 5.0) if guided else (None, 1.0)
    prompt = "A red cat, running 99 times!" if guided else "a red cat running"  # <unk>, digits
    frames, progress = generate(engines[version], prompt, negative, scale)
    expected = reference(references[version], prompt, negative, scale)
    assert frames.shape == (FRAMES, SIZE, SIZE, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(frames, expected)
    assert progress == list(range(1, STEPS))  # one output per denoising step before the video


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_frames_within_one_level_of_from_pretrained(engines, pretrained, version):
    prompt, negative, scale = "A red cat, running 99 times!", "blurry dark", 5.0
    frames, _ = generate(engines[version], prompt, negative, scale)
    expected = reference(pretrained[version], prompt, negative, scale)
    assert np.abs(frames.astype(int) - expected).max() <= 1


def test_wan22_second_guidance_scale_is_the_low_noise_experts(engines, references):
    args = ("a red cat running", "blurry dark", 5.0)
    frames, _ = generate(engines["2.2"], *args, guidance_scale_2=2.0)
    np.testing.assert_array_equal(frames, reference(references["2.2"], *args, guidance_scale_2=2.0))
    same, _ = generate(engines["2.2"], *args)  # unset: the high-noise scale throughout
    assert np.abs(frames.astype(int) - same.astype(int)).max() > 1


def test_a_perturbed_input_changes_the_frames(engines):
    base, _ = generate(engines["2.1"], "a red cat running", "blurry dark", 5.0)
    changes = {
        "prompt": generate(engines["2.1"], "a blue dog flying", "blurry dark", 5.0)[0],
        "negative prompt": generate(engines["2.1"], "a red cat running", "sharp", 5.0)[0],
        "guidance scale": generate(engines["2.1"], "a red cat running", "blurry dark", 3.0)[0],
        "unguided": generate(engines["2.1"], "a red cat running", None, 1.0)[0],
        "seed": generate(engines["2.1"], "a red cat running", "blurry dark", 5.0, seed=8)[0],
    }
    diffs = {k: int(np.abs(base.astype(int) - v.astype(int)).max()) for k, v in changes.items()}
    assert min(diffs.values()) > 1, diffs
