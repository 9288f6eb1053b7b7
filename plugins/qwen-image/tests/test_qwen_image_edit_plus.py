"""``qwen-image-edit-plus`` (several input images) against diffusers' ``QwenImageEditPlusPipeline``
on ``tiny-qwen-image-edit-plus`` (float32, two inputs of different sizes, 4 steps).

As for Edit (test_qwen_image_edit.py), the reference gets ``prompt_embeds`` with correct
image-token positions: the encoder's last hidden states from the whole processor output
(``mm_token_type_ids`` included) for Edit-Plus's prompt (``Picture N: <|vision_start|>
<|image_pad|><|vision_end|>`` per image before the text) and the images the pipeline resizes for
its VL prompt; the module's sizes are patched to the tiny ones (VL images at about 48² pixels,
VAE images and the output at about 32²: ``CONDITION_IMAGE_SIZE``, ``VAE_IMAGE_SIZE`` and the
``1024*1024`` of the output's default size).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from omni_qwen_image.build_edit import (
    EDIT_PLUS_IMAGE_PROMPT,
    EDIT_PLUS_TEMPLATE,
    EDIT_PREFIX_TOKENS,
)
from omni_qwen_image.pipelines import PLUS_VL_SIZE, qwen_image_edit_pipeline

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.media import Image
from omni_core.plugin.hooks import PluginHost

SIZE, STEPS, SEED = 32, 4, 5


@pytest.fixture(scope="module")
def engine(qi_cache, plus_pipe):
    data = qwen_image_edit_pipeline(
        PluginHost.create(OmniSettings()), "tiny-qwen-image-edit-plus", plus=True
    ).model_dump(mode="json", exclude_none=True)
    settings = OmniSettings(cache_dir=qi_cache, startup_timeout_s=300.0)
    engine = AsyncOmniEngine(
        PipelineConfig.from_dict(data), settings=settings, plugins=PluginHost.create(settings)
    )
    yield engine
    engine.shutdown()


def picture(seed: int, width: int, height: int) -> Any:
    from PIL import Image as PILImage

    rng = np.random.RandomState(seed)
    return PILImage.fromarray((rng.rand(height, width, 3) * 255).astype(np.uint8))


async def run(engine, prompt: str, images: list[Any], **dit: Any) -> np.ndarray:
    request = {"prompt": prompt, "multi_modal_data": {"image": images}}
    params = {"dit": {"seed": SEED, **dit}}
    outputs = [o async for o in engine.generate(request, sampling_params=params)]
    (last,) = [o for o in outputs if o.finished]
    assert last.error is None and last.finish_reason == "stop", last.error
    assert isinstance(last.payload, Image)
    return last.payload.pixels


def hf_embeds(pipe, prompt: str, images: list[Any]) -> torch.Tensor:
    text = "".join(EDIT_PLUS_IMAGE_PROMPT.format(i + 1) for i in range(len(images))) + prompt
    inputs = pipe.processor(
        text=[EDIT_PLUS_TEMPLATE.format(text)], images=images, padding=True, return_tensors="pt"
    )
    assert "mm_token_type_ids" in inputs  # what diffusers 0.42.1 leaves out
    with torch.no_grad():
        out = pipe.text_encoder(**inputs, output_hidden_states=True)
    return out.hidden_states[-1][:, EDIT_PREFIX_TOKENS:]


def reference(pipe, prompt: str, images: list[Any], negative: str | None = None) -> np.ndarray:
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as module

    saved = module.calculate_dimensions, module.CONDITION_IMAGE_SIZE, module.VAE_IMAGE_SIZE
    original = saved[0]
    module.calculate_dimensions = lambda area, r: original(
        SIZE * SIZE if area == 1024 * 1024 else area, r
    )
    module.CONDITION_IMAGE_SIZE = PLUS_VL_SIZE * PLUS_VL_SIZE
    module.VAE_IMAGE_SIZE = SIZE * SIZE
    try:
        vl = []
        for image in images:  # what __call__ does for its VL prompt
            width, height = original(module.CONDITION_IMAGE_SIZE, image.width / image.height)
            vl.append(pipe.image_processor.resize(image, height, width))
        embeds = hf_embeds(pipe, prompt, vl)
        kwargs: dict[str, Any] = {"prompt_embeds": embeds, "prompt_embeds_mask": ones(embeds)}
        if negative is not None:
            neg = hf_embeds(pipe, negative, vl)
            kwargs.update(
                negative_prompt_embeds=neg,
                negative_prompt_embeds_mask=ones(neg),
                true_cfg_scale=4.0,
            )
        with torch.no_grad():
            out = pipe(
                image=images,
                num_inference_steps=STEPS,
                generator=torch.Generator().manual_seed(SEED),
                output_type="np",
                **kwargs,
            ).images[0]
    finally:
        module.calculate_dimensions, module.CONDITION_IMAGE_SIZE, module.VAE_IMAGE_SIZE = saved
    return (out * 255).round().astype(np.uint8)


def ones(embeds: torch.Tensor) -> torch.Tensor:
    return torch.ones(embeds.shape[:2], dtype=torch.long)


def diff(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape, (a.shape, b.shape)
    return int(np.abs(a.astype(int) - b.astype(int)).max())


async def test_two_input_images_unguided_and_guided_equal_the_pipeline(engine, plus_pipe):
    images = [picture(0, 32, 32), picture(1, 56, 40)]
    guided = {"cfg": {"negative_prompt": "blurry"}}
    plain, steered, one, swapped = await asyncio.gather(
        run(engine, "put them together", images),
        run(engine, "put them together", images, extra=guided),
        run(engine, "put them together", images[:1]),
        run(engine, "put them together", images[::-1]),
    )
    assert diff(plain, reference(plus_pipe, "put them together", images)) <= 1
    ref = reference(plus_pipe, "put them together", images, negative="blurry")
    assert diff(steered, ref) <= 1
    assert diff(one, reference(plus_pipe, "put them together", images[:1])) <= 1
    # sensitivity: guidance, the second image, and the images' order all show
    assert diff(plain, steered) > 8 and diff(plain, one) > 8 and diff(plain, swapped) > 8


async def test_more_images_than_the_encoder_takes_is_a_400_at_admission(engine):
    request = {"prompt": "x", "multi_modal_data": {"image": [picture(i, 32, 32) for i in range(4)]}}
    outputs = [o async for o in engine.generate(request)]
    assert len(outputs) == 1 and outputs[0].error.status_code == 400
    assert "4 input images" in outputs[0].error.message and "at most 3" in outputs[0].error.message


def test_the_plus_build_is_the_edit_build_under_the_plus_class(qi_cache, plus_pipe, tiny_qie):
    from omni_qwen_image.plugin import EDIT_CHECKSUMS, EDIT_PLUS_CHECKSUMS

    from omni_core.extend import packaged_checksums
    from omni_core.models import ensure_model, tree_hashes

    path = ensure_model("tiny-qwen-image-edit-plus", qi_cache, PluginHost.create(OmniSettings()))
    plus = tree_hashes(path)
    assert plus == packaged_checksums("omni_qwen_image", EDIT_PLUS_CHECKSUMS)
    edit = packaged_checksums("omni_qwen_image", EDIT_CHECKSUMS)
    assert [k for k in plus if plus[k] != edit[k]] == ["model_index.json"]
    assert (path / "model_index.json").read_text().count('"QwenImageEditPlusPipeline"') == 1


def test_openai_client_edits_with_two_images(qi_cache, plus_pipe):
    """``client.images.edit(image=[a, b])`` (the SDK's ``image[]`` parts) on an Edit-Plus server:
    the PNG is the pipeline's edit of both images for the seed."""
    import base64
    import io

    import omni_cfg.plugin
    import omni_qwen_image.plugin
    import openai
    from PIL import Image as PILImage

    from omni_core.testing.server import running_server

    images = [picture(0, 32, 32), picture(1, 56, 40)]
    files = []
    for i, image in enumerate(images):
        raw = io.BytesIO()
        image.save(raw, format="PNG")
        files.append((f"{i}.png", raw.getvalue(), "image/png"))
    settings = OmniSettings(cache_dir=qi_cache, startup_timeout_s=300.0, shutdown_timeout_s=5.0)
    plugins = [("qwen-image", omni_qwen_image.plugin), ("cfg", omni_cfg.plugin)]
    with running_server("qwen-image-edit-plus", plugins=plugins, settings=settings) as (url, _, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        result = client.images.edit(
            model="qwen-image-edit-plus",
            image=files,
            prompt="put them together",
            extra_body={"seed": SEED},
        )
    (item,) = result.data
    got = np.asarray(PILImage.open(io.BytesIO(base64.b64decode(item.b64_json or ""))))
    assert diff(got, reference(plus_pipe, "put them together", images)) <= 1


@pytest.mark.timeout(600)
def test_omni_run_with_two_image_flags(qi_cache, plus_pipe, tmp_path):
    """``omni run qwen-image-edit-plus --image a.png --image b.png``: both images, in order."""
    import os
    import subprocess
    import sys

    from PIL import Image as PILImage

    images = [picture(0, 32, 32), picture(1, 56, 40)]
    flags = []
    for i, image in enumerate(images):
        image.save(tmp_path / f"{i}.png")
        flags += ["--image", str(tmp_path / f"{i}.png")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    env["OMNI_CACHE_DIR"] = str(qi_cache)
    flags += ["--prompt", "put them together", "--seed", str(SEED), "-o", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", "run", "qwen-image-edit-plus", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = (tmp_path / "out").glob("*.png")
    got = np.asarray(PILImage.open(path).convert("RGB"))
    assert diff(got, reference(plus_pipe, "put them together", images)) <= 1
