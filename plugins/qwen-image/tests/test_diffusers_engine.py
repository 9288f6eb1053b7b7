"""The ``diffusers`` engine in this process against diffusers' ``QwenImagePipeline`` on the tiny
checkpoint: float32, the same prompt embeddings and the same latents (the engine's seed), 32x32,
3 steps. The engine's float pixels (before its uint8 rounding) must equal the pipeline's
``output_type="np"`` image within 1e-3 max abs in [0, 1], unguided and with true CFG (norm
rescaling), with several samples of two sizes stepping together: the conditionings of one size
run through the transformer batched, texts padded and masked (measured: ~1e-6; with
``max_batch: 1``, the pipeline's own calls, identical).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omni_qwen_image.engine import DiffusersEngine

from omni_core.errors import RequestError
from omni_core.media import Image
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest

SIZE, STEPS, TOLERANCE = 32, 3, 1e-3


@pytest.fixture(scope="module")
def engine(tiny_qi):
    args = {"steps": STEPS, "height": SIZE, "width": SIZE, "true_cfg_scale": 4.0}
    engine = DiffusersEngine({"model": str(tiny_qi), "args": args})
    decoded: dict[int, list[np.ndarray]] = {}
    decode = engine.decode

    def recording(latents, height, width):  # the float image each output is rounded from
        pixels = decode(latents, height, width)
        decoded.setdefault(id(engine), []).append(pixels)
        return pixels

    engine.decode = recording
    engine.decoded = decoded.setdefault(id(engine), [])
    return engine


def request(rid: str, prompt, seed: int = 0, **extra) -> StageRequest:
    return StageRequest(
        request_id=rid, prompt=prompt, params=SamplingParams(seed=seed, extra=extra)
    )


def run(engine, *requests: StageRequest) -> dict[str, list]:
    """Add the requests, step until none is left; each request's outputs in order."""
    for r in requests:
        engine.add(r)
    outputs: dict[str, list] = {}
    start = len(engine.decoded)
    order = []
    while engine.has_work():
        for out in engine.step():
            if isinstance(out.payload, Image):  # off the data plane, as the client does
                out.payload = Image(engine.plane.take(out.payload.pixels))
            outputs.setdefault(out.request_id, []).append(out)
            order.append(out.request_id)
    floats = dict(zip(order, engine.decoded[start:], strict=True))
    return {rid: [*outs, floats[rid]] for rid, outs in outputs.items()}


def embeds(pipe, text: str) -> np.ndarray:
    with torch.no_grad():
        pe, mask = pipe.encode_prompt(text, device="cpu")
    assert mask is None
    return pe[0].numpy()


def reference(pipe, seed: int, pos, neg=None, scale=4.0, size=SIZE):
    gen = torch.Generator().manual_seed(seed)
    latents = pipe.prepare_latents(1, 4, size, size, torch.float32, "cpu", gen)
    kwargs = {}
    if neg is not None:
        kwargs = {"negative_prompt_embeds": torch.from_numpy(neg)[None], "true_cfg_scale": scale}
    with torch.no_grad():
        return pipe(
            prompt_embeds=torch.from_numpy(pos)[None],
            latents=latents,
            num_inference_steps=STEPS,
            height=size,
            width=size,
            output_type="np",
            **kwargs,
        ).images[0]


def test_unguided_and_guided_samples_stepping_together_equal_the_pipeline(engine, pipe):
    pos, neg = embeds(pipe, "a red square"), embeds(pipe, "blurry")
    other = embeds(pipe, "two cats on a wooden table")
    got = run(
        engine,
        request("plain", {"prompt_embeds": pos}, seed=7),
        request("cfg", {"prompt_embeds": pos, "negative_prompt_embeds": neg}, seed=7),
        request(
            "weights",  # omni-cfg's shape: the request's own first, weights summing to 1
            {
                "conditionings": [
                    {"prompt_embeds": other, "weight": 2.5},
                    {"prompt_embeds": neg, "weight": -1.5},
                ]
            },
            seed=3,
        ),
        request(  # the generic image options, the kind's own winning field by field
            "big",
            {"prompt_embeds": other},
            seed=1,
            image={"height": 48, "width": 32},
            diffusers={"width": 48},
        ),
    )
    expected = {
        "plain": reference(pipe, 7, pos),
        "cfg": reference(pipe, 7, pos, neg),
        "weights": reference(pipe, 3, other, neg, scale=2.5),
        "big": reference(pipe, 1, other, size=48),
    }
    for rid, ref in expected.items():
        (out, pixels) = got[rid]
        assert out.finished and out.finish_reason == "stop" and isinstance(out.payload, Image)
        assert pixels.shape == ref.shape
        assert np.abs(pixels - ref).max() <= TOLERANCE, rid
        image, rounded = out.payload.pixels, (ref * 255).round().astype(np.int64)
        assert image.dtype == np.uint8 and np.abs(image - rounded).max() <= 1
    assert np.abs(got["plain"][1] - got["cfg"][1]).max() > 0.01  # guidance changes the image


def test_scale_one_or_a_zero_negative_weight_is_the_unguided_image(engine, pipe):
    pos, neg = embeds(pipe, "a red square"), embeds(pipe, "blurry")
    got = run(
        engine,
        request(
            "one",
            {"prompt_embeds": pos, "negative_prompt_embeds": neg},
            diffusers={"true_cfg_scale": 1.0},
        ),
        request(
            "zero",
            {
                "conditionings": [
                    {"prompt_embeds": pos, "weight": 1.0},
                    {"prompt_embeds": neg, "weight": 0.0},
                ]
            },
        ),
    )
    ref = reference(pipe, 0, pos)
    assert np.abs(got["one"][1] - ref).max() <= 1e-5
    assert np.abs(got["zero"][1] - ref).max() <= 1e-5


def test_previews_then_the_image_and_abort_between_steps_leaves_nothing(engine, pipe):
    pos = embeds(pipe, "a red square")
    got = run(engine, request("p", {"prompt_embeds": pos}, diffusers={"preview_every": 1}))
    outs = got["p"][:-1]
    assert [o.finished for o in outs] == [False, False, True]
    assert all(isinstance(o.payload, Image) for o in outs)
    engine.add(request("gone", {"prompt_embeds": pos}))
    engine.step()
    engine.abort(["gone"])
    assert not engine.has_work() and engine.step() == []


@pytest.mark.parametrize(
    ("prompt", "extra", "where"),
    [
        ("a red square", {}, "prompt"),
        ({"prompt_embeds": np.zeros((4, 8), np.float32)}, {}, "prompt_embeds"),
        ({"conditionings": [{"tokens": [1, 2], "weight": 1.0}]}, {}, "conditionings[0]"),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"diffusers": {"height": 40}},
            "extra['diffusers'].height",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"diffusers": {"steps": 0}},
            "extra['diffusers'].steps",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"diffusers": {"steps": 10**10}},
            "extra['diffusers'].steps",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"diffusers": {"width": 65536}},
            "extra['diffusers'].width",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"diffusers": {"seed": 2**64}},
            "extra['diffusers'].seed",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"image": {"height": 40}},
            "extra['image'].height",
        ),
        (  # past the stage's max_pixels (1024x1024): the replica checks too
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"image": {"height": 2048, "width": 1024}},
            "extra['image'].width",
        ),
        (  # the generic section takes no kind-specific option
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"image": {"true_cfg_scale": 1.0}},
            "extra['image'].true_cfg_scale",
        ),
        (
            {"prompt_embeds": np.zeros((4, 64), np.float32)},
            {"cfg": {"negative_prompt": "x"}},
            "cfg",
        ),
    ],
)
def test_bad_input_is_one_request_error_naming_the_field(engine, prompt, extra, where):
    with pytest.raises(RequestError) as info:
        engine.add(request("bad", prompt, **extra))
    assert info.value.param == where and where.split("[")[0].split(".")[0] in str(info.value)
    assert not engine.has_work()


def test_one_row_per_forward_is_exactly_the_pipeline(tiny_qi, pipe):
    args = {"steps": STEPS, "height": SIZE, "width": SIZE, "max_batch": 1}
    engine = DiffusersEngine({"model": str(tiny_qi), "args": args})
    pos, neg = embeds(pipe, "a red square"), embeds(pipe, "blurry")
    engine.add(request("a", {"prompt_embeds": pos, "negative_prompt_embeds": neg}, seed=2))
    engine.add(request("b", {"prompt_embeds": neg}, seed=4))
    samples = dict(engine.samples)
    while engine.has_work():
        for out in engine.step():
            engine.plane.take(out.payload.pixels)
    for rid, ref in (("a", reference(pipe, 2, pos, neg)), ("b", reference(pipe, 4, neg))):
        pixels = engine.decode(samples[rid].latents, SIZE, SIZE)
        assert np.array_equal(pixels, ref), rid


def test_bfloat16_equals_the_pipeline_in_bfloat16(tiny_qi, pipe):
    """The stage casts the float32 embeddings; the pipeline is handed bfloat16 ones (it casts
    nothing). This random tiny model is far from its float32 image in bfloat16 (~0.3), so the
    reference is diffusers' own bfloat16 run (measured: identical)."""
    from diffusers import QwenImagePipeline

    args = {"steps": STEPS, "height": SIZE, "width": SIZE, "dtype": "bfloat16"}
    engine = DiffusersEngine({"model": str(tiny_qi), "args": args})
    assert engine.pipe.transformer.dtype == torch.bfloat16
    pos, neg = embeds(pipe, "a red square"), embeds(pipe, "blurry")
    engine.add(request("a", {"prompt_embeds": pos, "negative_prompt_embeds": neg}, seed=2))
    sample = engine.samples["a"]
    while engine.has_work():
        for out in engine.step():
            engine.plane.take(out.payload.pixels)
    pixels = engine.decode(sample.latents, SIZE, SIZE)
    bf16 = QwenImagePipeline.from_pretrained(str(tiny_qi), dtype=torch.bfloat16)
    bf16.set_progress_bar_config(disable=True)
    with torch.no_grad():
        ref = bf16(
            prompt_embeds=torch.from_numpy(pos)[None].bfloat16(),
            negative_prompt_embeds=torch.from_numpy(neg)[None].bfloat16(),
            true_cfg_scale=4.0,
            num_inference_steps=STEPS,
            height=SIZE,
            width=SIZE,
            generator=torch.Generator().manual_seed(2),
            output_type="np",
        ).images[0]
    assert pixels.dtype == np.float32 and np.abs(pixels - ref).max() <= TOLERANCE
