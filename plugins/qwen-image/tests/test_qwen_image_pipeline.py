"""The ``qwen-image`` pipeline end to end against diffusers' ``QwenImagePipeline`` on the tiny
checkpoint (float32, 32x32, 4 steps), one engine for the module.

* The encoder stage (core ``vllm`` kind, pooling) gives ``encode_prompt``'s embeddings within
  1e-4 max abs (measured: about 5e-7).
* The image (uint8, as the caller gets it) is the pipeline's image for the same seed, within one
  level of 255 (measured: identical; the float pixels are compared within 1e-3 in
  ``test_diffusers_engine.py``), unguided and guided: a negative prompt and guidance scale go
  through omni-cfg's companion (the negative prompt encoded by the encoder stage, released to the
  diffusers stage with the request), which no caller-visible output shows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from omni_qwen_image.pipelines import qwen_image_pipeline

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.media import Image
from omni_core.plugin.hooks import PluginHost

SIZE, STEPS = 32, 4


@pytest.fixture(scope="module")
def engine(qi_cache, tiny_qi):
    data = qwen_image_pipeline(PluginHost.create(OmniSettings())).model_dump(
        mode="json", exclude_none=True
    )
    # unguided unless a request asks, then QwenImagePipeline's true_cfg_scale unless it says
    assert data["cfg"]["enabled"] is False and data["cfg"]["guidance_scale"] == 4.0
    encoder = data["stages"][0]
    encoder.update(final_output=True, final_output_type="latent")  # its states visible here
    settings = OmniSettings(cache_dir=qi_cache, startup_timeout_s=300.0)
    engine = AsyncOmniEngine(
        PipelineConfig.from_dict(data), settings=settings, plugins=PluginHost.create(settings)
    )
    yield engine
    engine.shutdown()


async def run(engine, prompt: str, modality: str, **dit: Any) -> list[Any]:
    params = {"dit": {"seed": 5, **dit}}
    return [o async for o in engine.generate(prompt, sampling_params=params, modalities=[modality])]


def image_of(outputs: list[Any]) -> np.ndarray:
    assert [o.finished for o in outputs][-1] and sum(o.finished for o in outputs) == 1
    (last,) = [o for o in outputs if o.finished]
    assert last.error is None and last.finish_reason == "stop" and last.stage_name == "dit"
    assert isinstance(last.payload, Image)
    return last.payload.pixels


def reference(pipe, prompt: str, **kwargs: Any) -> np.ndarray:
    with torch.no_grad():
        image = pipe(
            prompt=prompt,
            num_inference_steps=STEPS,
            height=SIZE,
            width=SIZE,
            generator=torch.Generator().manual_seed(5),
            output_type="np",
            **kwargs,
        ).images[0]
    return (image * 255).round().astype(np.uint8)


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 1


async def test_encoder_states_equal_encode_prompt(engine, pipe):
    prompts = ["a red square", "two cats on a wooden table next to a window", ""]
    results = await asyncio.gather(*(run(engine, p, "latent") for p in prompts))
    for prompt, outputs in zip(prompts, results, strict=True):
        (out,) = outputs
        assert out.stage_name == "encoder" and out.finished
        states = out.hidden_states
        with torch.no_grad():
            ref, mask = pipe.encode_prompt(prompt, device="cpu")
        assert mask is None and states.start == 34
        assert states.layers["final"].shape == tuple(ref[0].shape)
        assert np.abs(states.layers["final"] - ref[0].numpy()).max() <= 1e-4


async def test_unguided_and_guided_images_equal_the_pipeline(engine, pipe):
    guided_params = {"cfg": {"negative_prompt": "blurry"}}  # what omni run --negative-prompt sets
    plain_out, guided_out = await asyncio.gather(
        run(engine, "a red square", "image"),
        run(engine, "a red square", "image", extra=guided_params),
    )
    plain, guided = image_of(plain_out), image_of(guided_out)
    assert plain.shape == (SIZE, SIZE, 3)
    assert close(plain, reference(pipe, "a red square"))
    assert close(
        guided, reference(pipe, "a red square", negative_prompt="blurry", true_cfg_scale=4.0)
    )
    assert np.abs(plain.astype(int) - guided.astype(int)).max() > 8  # guidance is real
    # the companion is nobody's output: every output is the request's own
    assert len({o.request_id for o in guided_out}) == 1
    assert all("#cfg" not in o.request_id for o in guided_out)


async def test_a_size_the_vae_does_not_allow_or_zero_steps_is_a_400_naming_the_field(engine):
    for extra, field in (({"height": 40}, "height"), ({"steps": 0}, "steps")):
        outputs = await run(engine, "a red square", "image", extra={"diffusers": extra})
        error = outputs[-1].error
        assert outputs[-1].finish_reason == "error" and error.status_code == 400
        assert f"extra['diffusers'].{field}" in error.message


async def test_an_image_over_the_stages_max_pixels_is_refused_at_admission(engine):
    extra = {"image": {"height": 4096, "width": 4096}}
    outputs = await run(engine, "a red square", "image", extra=extra)
    assert len(outputs) == 1 and outputs[0].finish_reason == "error"
    error = outputs[0].error  # refused by the plugin at admission, not by the replica
    assert error.status_code == 400 and error.type == "RequestRejected"
    assert error.message == (
        "extra['image'].width x extra['image'].height: 4096x4096 = 16777216 pixels, at most "
        "1048576 (stage 'dit' engine_args.max_pixels)"
    )


async def test_an_abort_between_steps_is_a_whole_sample_retry_and_the_stage_serves_on(engine):
    params = {"dit": {"seed": 5, "extra": {"diffusers": {"steps": 400, "preview_every": 1}}}}
    stream = engine.generate("a red square", sampling_params=params, modalities=["image"])
    first = await stream.__anext__()  # a preview: the sample is between steps
    assert first.stage_name == "dit" and not first.finished and isinstance(first.payload, Image)
    result = await engine.abort_async(first.request_id, timeout=60)
    assert result.success
    rest = [o async for o in stream]
    final = [o for o in [first, *rest, *result.outputs] if o.finished]
    assert final and final[-1].finish_reason == "abort" and final[-1].whole_sample_retry
    image = image_of(await run(engine, "a red square", "image"))  # the replica serves on
    assert image.shape == (SIZE, SIZE, 3)
