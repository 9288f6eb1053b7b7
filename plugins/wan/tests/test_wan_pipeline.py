"""The ``wan2.2-t2v`` pipeline end to end on stage processes (one engine for the module): omni-cfg's
companion carries the negative prompt; two requests in flight step together (their rows batched
in one DiT forward); the video equals diffusers' ``WanPipeline``'s; an MP4 round trip; bad sizes
are 400s at admission; an abort stops denoising between steps."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from omni_wan.pipelines import wan_pipeline
from omni_wan.video import Progress, Video, mp4_bytes, read_mp4

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.plugin import PluginHost

SIZE, FRAMES, STEPS, SEED = 32, 5, 4, 3


@pytest.fixture(scope="module")
def engine(wan_cache, tiny_wan):
    config = wan_pipeline(PluginHost.create(OmniSettings()), "2.2")
    data = config.model_dump(mode="json", exclude_none=True)
    assert data["cfg"]["enabled"] is False and data["cfg"]["guidance_scale"] == 5.0
    settings = OmniSettings(cache_dir=wan_cache, startup_timeout_s=300.0)
    engine = AsyncOmniEngine(
        PipelineConfig.from_dict(data), settings=settings, plugins=PluginHost.create(settings)
    )
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def reference(tiny_wan):
    from omni_wan.load import pipeline

    return pipeline(tiny_wan["2.2"])


async def run(engine: Any, prompt: str, **extra: Any) -> list[Any]:
    params = {"dit": {"seed": SEED, "extra": extra}}
    return [o async for o in engine.generate(prompt, sampling_params=params)]


def video_of(outputs: list[Any]) -> Any:
    *steps, last = outputs
    assert last.finished and last.error is None and last.stage_name == "dit"
    assert [o.payload.step for o in steps] == list(range(1, STEPS))  # a progress output a step
    assert all(isinstance(o.payload, Progress) and not o.finished for o in steps)
    assert isinstance(last.payload, Video)
    return last.payload.frames


def expected(pipe: Any, prompt: str, **kwargs: Any) -> Any:
    import torch

    frames = pipe(
        prompt,
        height=SIZE,
        width=SIZE,
        num_frames=FRAMES,
        num_inference_steps=STEPS,
        generator=torch.Generator().manual_seed(SEED),
        output_type="np",
        max_sequence_length=32,  # the tiny pipelines' text_len
        **kwargs,
    ).frames[0]
    return (frames * 255).round().clip(0, 255).astype("uint8")


async def test_guided_and_unguided_in_flight_together_equal_the_pipeline(engine, reference):
    guided = {"cfg": {"negative_prompt": "blurry"}, "wan": {"guidance_scale_2": 2.0}}
    plain_out, guided_out = await asyncio.gather(
        run(engine, "a red cat running"), run(engine, "a red cat running", **guided)
    )
    plain, cfg = video_of(plain_out), video_of(guided_out)
    assert plain.shape == (FRAMES, SIZE, SIZE, 3)
    # batched rows (max_batch 8) vs the pipeline's one call per conditioning: within one level
    want_plain = expected(reference, "a red cat running", guidance_scale=1.0)
    want_cfg = expected(
        reference,
        "a red cat running",
        negative_prompt="blurry",
        guidance_scale=5.0,
        guidance_scale_2=2.0,
    )
    assert np.abs(plain.astype(int) - want_plain.astype(int)).max() <= 1
    assert np.abs(cfg.astype(int) - want_cfg.astype(int)).max() <= 1
    assert np.abs(plain.astype(int) - cfg.astype(int)).max() > 1  # guidance is real
    assert all("#cfg" not in o.request_id for o in guided_out)  # the companion is hidden

    frames, fps = read_mp4(mp4_bytes(cfg, 16))  # MPEG-4 is lossy: shape and rate only
    assert frames.shape == (FRAMES, SIZE, SIZE, 3) and fps == 16


@pytest.mark.parametrize(
    ("wan", "message"),
    [
        ({"num_frames": 6}, "extra['wan'].num_frames: 6 frames; Wan needs 4k+1 (e.g. 5)"),
        (
            {"num_frames": 33, "height": 256, "width": 512},
            "extra['wan'].num_frames x height x width: 33x256x512 = 4325376, at most 2162688 "
            "(stage 'dit' engine_args.max_voxels)",
        ),
        ({"height": 40}, "extra['wan'].height: Input should be a multiple of 16"),
    ],
)
async def test_a_bad_size_is_refused_at_admission_naming_the_field(engine, wan, message):
    (out,) = await run(engine, "a red cat", wan=wan)
    assert out.finish_reason == "error" and out.error.status_code == 400
    assert out.error.type == "RequestRejected" and out.error.message == message


async def test_an_abort_stops_denoising_between_steps_and_the_stage_serves_on(engine):
    params = {"dit": {"seed": SEED, "extra": {"wan": {"steps": 400}}}}
    stream = engine.generate("a red cat", sampling_params=params)
    first = await stream.__anext__()
    assert isinstance(first.payload, Progress) and first.payload.step == 1
    result = await engine.abort_async(first.request_id, timeout=60)
    assert result.success
    rest = [o async for o in stream]
    seen = [first, *rest, *result.outputs]
    assert max(o.payload.step for o in seen if isinstance(o.payload, Progress)) < 400
    final = [o for o in seen if o.finished]
    assert final and final[-1].finish_reason == "abort" and final[-1].whole_sample_retry
    assert video_of(await run(engine, "a red cat")).shape == (FRAMES, SIZE, SIZE, 3)
