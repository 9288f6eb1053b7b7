"""``qwen-image-edit`` end to end against diffusers' ``QwenImageEditPipeline`` on the tiny
checkpoint (float32, a 32x32 input, condition area 32x32, 4 steps), one engine for the module.

The reference is built correctly, not taken as is: diffusers 0.42.1's edit pipeline calls its
text encoder without the processor's ``mm_token_type_ids``, so on transformers 5.19 its own
prompt path gives the image tokens wrong M-RoPE positions. Here the reference's ``prompt_embeds``
(and ``negative_prompt_embeds``) are the encoder's last hidden states from the *whole* processor
output (``text_encoder(**processor(text, images), output_hidden_states=True)``, rows after the
64-token prefix), for the image the pipeline resizes for its VL prompt, and the pipeline gets them
with the input ``image`` (its VAE latents). diffusers' ``calculate_dimensions(1024*1024, r)`` is
patched to the tiny area (the pipeline resizes to about 1 MP otherwise). The encoder stage
resizes the input the same way before vLLM's processor (``pooling.image_area``), the ``dit``
stage for the VAE: a 56x40 input checks that path.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from omni_qwen_image.build import PROMPT_TEMPLATE, TEMPLATE_PREFIX_TOKENS
from omni_qwen_image.build_edit import EDIT_PREFIX_TOKENS, EDIT_TEMPLATE
from omni_qwen_image.pipelines import qwen_image_edit_pipeline
from omni_qwen_image.plugin import EDIT_CHECKSUMS

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.media import Image
from omni_core.plugin.hooks import PluginHost

SIZE, STEPS, SEED = 32, 4, 5


def test_rebuild_is_byte_identical_to_the_committed_checksums_and_prefixes_fit(tiny_qie):
    from transformers import AutoTokenizer

    from omni_core.extend import packaged_checksums
    from omni_core.models import tree_hashes

    code = (
        "import json\nfrom omni_qwen_image.build_edit import build_edit\nfrom pathlib import Path\n"
        "from omni_core.models import tree_hashes\nimport tempfile\n"
        "d = Path(tempfile.mkdtemp())\nbuild_edit(d)\nprint(json.dumps(tree_hashes(d)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    assert fresh == tree_hashes(tiny_qie) == packaged_checksums("omni_qwen_image", EDIT_CHECKSUMS)
    assert "text_encoder_vl/processor_config.json" in fresh
    tok = AutoTokenizer.from_pretrained(tiny_qie / "tokenizer")
    edit_prefix = EDIT_TEMPLATE.split("<|vision_start|>")[0]
    assert len(tok(edit_prefix).input_ids) == EDIT_PREFIX_TOKENS == 64
    t2i_prefix = PROMPT_TEMPLATE.split("{}")[0]  # the same tokenizer serves Qwen-Image's template
    assert len(tok(t2i_prefix).input_ids) == TEMPLATE_PREFIX_TOKENS == 34


@pytest.fixture(scope="module")
def engine(qi_cache, tiny_qie):
    data = qwen_image_edit_pipeline(PluginHost.create(OmniSettings())).model_dump(
        mode="json", exclude_none=True
    )
    assert data["cfg"]["share_media"] is True and data["cfg"]["enabled"] is False
    data["stages"][0].update(final_output=True, final_output_type="latent")
    settings = OmniSettings(cache_dir=qi_cache, startup_timeout_s=300.0)
    engine = AsyncOmniEngine(
        PipelineConfig.from_dict(data), settings=settings, plugins=PluginHost.create(settings)
    )
    yield engine
    engine.shutdown()


def picture(seed: int, width: int = SIZE, height: int = SIZE) -> Any:
    from PIL import Image as PILImage

    rng = np.random.RandomState(seed)
    return PILImage.fromarray((rng.rand(height, width, 3) * 255).astype(np.uint8))


async def run(engine, prompt: str, image: Any, modality: str, **dit: Any) -> list[Any]:
    request = {"prompt": prompt, "multi_modal_data": {"image": image}}
    params = {"dit": {"seed": SEED, **dit}}
    return [
        o async for o in engine.generate(request, sampling_params=params, modalities=[modality])
    ]


def image_of(outputs: list[Any]) -> np.ndarray:
    (last,) = [o for o in outputs if o.finished]
    assert last.error is None and last.finish_reason == "stop" and last.stage_name == "dit"
    assert isinstance(last.payload, Image)
    return last.payload.pixels


def hf_embeds(pipe, prompt: str, image: Any) -> torch.Tensor:
    """The encoder's rows with correct image-token positions (``mm_token_type_ids`` passed)."""
    inputs = pipe.processor(
        text=[EDIT_TEMPLATE.format(prompt)], images=[image], padding=True, return_tensors="pt"
    )
    assert "mm_token_type_ids" in inputs  # what diffusers 0.42.1 leaves out
    with torch.no_grad():
        out = pipe.text_encoder(**inputs, output_hidden_states=True)
    return out.hidden_states[-1][:, EDIT_PREFIX_TOKENS:]


def reference(pipe, prompt: str, image: Any, negative: str | None = None, own: bool = False):
    """diffusers' image (uint8) for the same seed; ``own``: its own (faulty) prompt path."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as module

    original = module.calculate_dimensions
    module.calculate_dimensions = lambda area, ratio: original(SIZE * SIZE, ratio)
    try:
        width, height, _ = module.calculate_dimensions(0, image.width / image.height)
        vl_image = pipe.image_processor.resize(image, height, width)  # what __call__ does
        kwargs: dict[str, Any] = {}
        if own:
            kwargs["prompt"] = prompt
            if negative is not None:
                kwargs.update(negative_prompt=negative, true_cfg_scale=4.0)
        else:
            embeds = hf_embeds(pipe, prompt, vl_image)
            kwargs.update(prompt_embeds=embeds, prompt_embeds_mask=ones(embeds))
            if negative is not None:
                neg = hf_embeds(pipe, negative, vl_image)
                kwargs.update(
                    negative_prompt_embeds=neg,
                    negative_prompt_embeds_mask=ones(neg),
                    true_cfg_scale=4.0,
                )
        with torch.no_grad():
            out = pipe(
                image=image,
                num_inference_steps=STEPS,
                generator=torch.Generator().manual_seed(SEED),
                output_type="np",
                **kwargs,
            ).images[0]
    finally:
        module.calculate_dimensions = original
    return (out * 255).round().astype(np.uint8)


def ones(embeds: torch.Tensor) -> torch.Tensor:
    return torch.ones(embeds.shape[:2], dtype=torch.long)


def diff(a: np.ndarray, b: np.ndarray) -> int:
    assert a.shape == b.shape
    return int(np.abs(a.astype(int) - b.astype(int)).max())


async def test_encoder_states_equal_the_vl_encoder_with_correct_image_positions(engine, edit_pipe):
    image = picture(0)
    (out,) = await run(engine, "make it red", image, "latent")
    states = out.hidden_states
    ref = hf_embeds(edit_pipe, "make it red", image)[0].numpy()
    assert out.stage_name == "encoder" and states.start == 64
    assert states.layers["final"].shape == ref.shape  # vision start, 4 image tokens, ... suffix
    assert np.abs(states.layers["final"] - ref).max() <= 1e-4


async def test_unguided_and_guided_edits_equal_the_pipeline(engine, edit_pipe):
    image, other = picture(0), picture(1, 56, 40)  # the other one resized (both stages)
    guided_params = {"cfg": {"negative_prompt": "blurry"}}
    plain_out, guided_out, other_out = await asyncio.gather(
        run(engine, "make it red", image, "image"),
        run(engine, "make it red", image, "image", extra=guided_params),
        run(engine, "make it red", other, "image"),
    )
    plain, guided, moved = image_of(plain_out), image_of(guided_out), image_of(other_out)
    assert plain.shape == (SIZE, SIZE, 3)  # the input's condition size by default
    assert diff(plain, reference(edit_pipe, "make it red", image)) <= 1
    assert diff(guided, reference(edit_pipe, "make it red", image, negative="blurry")) <= 1
    # sensitivity: guidance, the input image, and the image-token positions all show
    assert diff(plain, guided) > 8
    assert diff(moved, reference(edit_pipe, "make it red", other)) <= 1
    assert diff(plain, moved) > 8
    faulty = reference(edit_pipe, "make it red", image, negative="blurry", own=True)
    assert diff(guided, faulty) > 1  # diffusers' own prompt path (no mm_token_type_ids)
    assert all("#cfg" not in o.request_id for o in guided_out)


async def test_an_explicit_size_and_bad_inputs(engine):
    sized = image_of(
        await run(engine, "make it red", picture(0), "image", extra={"image": {"height": 48}})
    )
    assert sized.shape == (48, SIZE, 3)
    for image, words in (
        (np.zeros((4, 4), dtype=np.float32), "uint8 [height, width, 3] expected"),
        ([picture(0), picture(1)], "2 input images"),
        (None, "the prompt carries none"),
    ):
        outputs = await run(engine, "make it red", image, "image")
        assert len(outputs) == 1 and outputs[0].finish_reason == "error"  # at admission
        error = outputs[0].error
        assert error.status_code == 400 and error.type == "RequestRejected"
        assert error.message.startswith("multi_modal_data['image']: ") and words in error.message


@pytest.mark.timeout(600)
def test_omni_run_edits_the_image_file(qi_cache, tiny_qie, edit_pipe, tmp_path):
    """``omni run qwen-image-edit --image in.png``: the first stage's renderer sends the file
    as the prompt's ``multi_modal_data`` image; the PNG is the pipeline's edit for the seed."""
    import os

    from PIL import Image as PILImage

    picture(2).save(tmp_path / "in.png")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    env["OMNI_CACHE_DIR"] = str(qi_cache)
    flags = ["--image", str(tmp_path / "in.png"), "--prompt", "make it red", "--seed", str(SEED)]
    flags += ["-o", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "omni_core.cli", "run", "qwen-image-edit", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = (tmp_path / "out").glob("*.png")
    got = np.asarray(PILImage.open(path).convert("RGB"))
    assert diff(got, reference(edit_pipe, "make it red", picture(2))) <= 1


async def test_an_abort_between_steps_is_a_whole_sample_retry_and_the_edit_serves_on(engine):
    request = {"prompt": "make it red", "multi_modal_data": {"image": picture(0)}}
    params = {"dit": {"seed": SEED, "extra": {"diffusers": {"steps": 400, "preview_every": 1}}}}
    stream = engine.generate(request, sampling_params=params, modalities=["image"])
    first = await stream.__anext__()  # a preview: the sample is between steps
    assert first.stage_name == "dit" and not first.finished and isinstance(first.payload, Image)
    result = await engine.abort_async(first.request_id, timeout=60)
    assert result.success
    rest = [o async for o in stream]
    final = [o for o in [first, *rest, *result.outputs] if o.finished]
    assert final and final[-1].finish_reason == "abort" and final[-1].whole_sample_retry
    assert image_of(await run(engine, "make it red", picture(0), "image")).shape == (SIZE, SIZE, 3)
