"""A ``vllm`` stage with ``engine_args.pooling``: vLLM's pooling runner, each prompt's per-token
final hidden states as one output, against transformers' ``hidden_states[-1]`` on tiny-thinker.

float32; the states must equal the reference's rows ``drop_prefix..`` within 1e-4 max abs
(measured: about 1e-6, vLLM's and transformers' float32 kernels differ). One engine for the
module; requests run concurrently (batched by vLLM's scheduler), one of them large enough for the
data plane. Failures are the request's (400) and the replica keeps serving.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.kinds.vllm_kind import VllmArgs
from omni_core.kinds.vllm_pooling import apply_template
from omni_core.models import ensure_model
from omni_core.plugin.hooks import PluginHost

TOLERANCE = 1e-4
TEMPLATE = "Describe this picture: {} Done."
INLINE = 2048  # bytes: a 64-wide float32 row is 256 B, so prompts past 8 states take the plane


def stage_args(**pooling: Any) -> dict[str, Any]:
    return {"model": "tiny-thinker", "max_model_len": 96, "pooling": pooling}


@pytest.fixture(scope="module")
def settings():
    return OmniSettings()


@pytest.fixture(scope="module")
def hf(settings):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_model("tiny-thinker", settings.cache_dir)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return tok, model


@pytest.fixture(scope="module")
def drop(hf):
    tok, _ = hf
    return len(tok(TEMPLATE.split("{}")[0]).input_ids)


@pytest.fixture(scope="module")
def engine(settings, drop):
    config = PipelineConfig.from_dict(
        {
            "name": "pooling",
            "stages": [
                {
                    "id": 0,
                    "name": "encoder",
                    "kind": "vllm",
                    "engine_args": stage_args(
                        template=TEMPLATE, drop_prefix=drop, inline_bytes=INLINE
                    ),
                    "final_output": True,
                    "final_output_type": "latent",
                }
            ],
        }
    )
    engine = AsyncOmniEngine(
        config, settings=settings, plugins=PluginHost.create(settings, load_entry_points=False)
    )
    yield engine
    engine.shutdown()


def reference(hf, ids: list[int]) -> np.ndarray:
    import torch

    _, model = hf
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    return out.hidden_states[-1][0].numpy()


async def run(engine, prompt: Any, request_id: str | None = None) -> list[Any]:
    return [o async for o in engine.generate(prompt, request_id=request_id)]


async def test_states_equal_transformers_final_layer_for_concurrent_prompts(engine, hf, drop):
    tok, _ = hf
    prompts = [
        "a red square",
        "two cats on a wooden table next to a window, in the style of an old photograph",
        "x",
    ]
    results = await asyncio.gather(*(run(engine, p) for p in prompts))
    for prompt, outputs in zip(prompts, results, strict=True):
        (out,) = outputs  # one output: the states, finished
        assert out.finished and out.finish_reason == "stop" and out.error is None
        assert out.text == "" and out.token_ids == []
        ids = tok(apply_template(TEMPLATE, prompt)).input_ids
        states = out.hidden_states
        assert states.start == drop and list(states.layers) == ["final"]
        array = states.layers["final"]
        assert isinstance(array, np.ndarray) and array.dtype == np.float32
        expected = reference(hf, ids)[drop:]
        assert array.shape == expected.shape == (len(ids) - drop, 64)
        assert np.abs(array - expected).max() <= TOLERANCE
    assert results[1][0].hidden_states.layers["final"].nbytes > INLINE  # came by the data plane


async def test_token_ids_are_taken_as_they_are_and_chats_are_templated(engine, hf, drop):
    ids = [5, 17, 99, 3, 42, 8, 61, 2, 11, 30] * 2
    (out,) = await run(engine, ids)
    expected = reference(hf, ids)[drop:]
    assert np.abs(out.hidden_states.layers["final"] - expected).max() <= TOLERANCE

    tok, _ = hf
    rendered = engine.render_chat([{"role": "user", "content": "a blue circle"}])
    assert rendered.prompt == "a blue circle"
    assert rendered.num_tokens == len(tok(apply_template(TEMPLATE, "a blue circle")).input_ids)
    (chat,) = await run(engine, rendered.prompt)
    (plain,) = await run(engine, "a blue circle")
    assert np.array_equal(chat.hidden_states.layers["final"], plain.hidden_states.layers["final"])


async def test_a_prompt_with_no_state_left_or_too_long_fails_alone(engine, drop):
    short = await run(engine, [1] * drop)  # only the dropped prefix
    assert short[-1].finish_reason == "error"
    assert short[-1].error.status_code == 400 and "pooling.drop_prefix" in short[-1].error.message
    long = await run(engine, "word " * 200)
    assert long[-1].finish_reason == "error" and long[-1].error.status_code == 400
    assert "max_model_len" in long[-1].error.message
    (ok,) = await run(engine, "still serving")
    assert ok.finish_reason == "stop" and ok.hidden_states.rows > 0


def test_pooling_config_is_checked():
    with pytest.raises(ValidationError, match="final layer only"):
        VllmArgs.model_validate(stage_args(layer="embeddings"))
    with pytest.raises(ValidationError, match=r"exactly one '\{\}'"):
        VllmArgs.model_validate(stage_args(template="no slot"))
    with pytest.raises(ValidationError, match="exclude each other"):
        VllmArgs.model_validate({**stage_args(), "hidden_states": {"layers": ["final"]}})
    args = VllmArgs.model_validate(stage_args(layer=-1, drop_prefix=3))
    assert args.pooling is not None and args.pooling.layer == "final"


def test_a_pooling_renderer_allowing_images_sends_them_as_multi_modal_data(settings):
    """With ``engine.limit_mm_per_prompt`` allowing an image, a chat's image part is decoded
    (within the media budget) into the prompt's ``multi_modal_data``; without, it is refused."""
    import base64
    import io

    from PIL import Image

    from omni_core.chat import ChatMessage, ChatOptions
    from omni_core.errors import RequestError
    from omni_core.kinds.vllm_pooling import PoolingRenderer

    path = ensure_model("tiny-thinker", settings.cache_dir)
    png = io.BytesIO()
    Image.new("RGB", (8, 6), (255, 0, 0)).save(png, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    content = [
        {"type": "text", "text": "make it red"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    chat = [ChatMessage.model_validate({"role": "user", "content": content})]
    rendered = PoolingRenderer("enc", path, TEMPLATE, media={"image": 1}).render_chat(
        chat, ChatOptions()
    )
    assert rendered.prompt["prompt"] == "make it red"
    (image,) = rendered.prompt["multi_modal_data"]["image"]
    assert image.size == (8, 6) and image.getpixel((0, 0)) == (255, 0, 0)
    with pytest.raises(
        RequestError, match=r"messages\[0\]\.content\[1\]: content part 'image_url'"
    ):
        PoolingRenderer("enc", path, TEMPLATE).render_chat(chat, ChatOptions())


def test_image_area_resizes_input_images_as_qwen_image_edit_does():
    """``pooling.image_area``: each input image resized to about that many pixels, aspect ratio
    kept, sides multiples of 32 (diffusers' ``calculate_dimensions``), before vLLM's processor."""
    from PIL import Image

    from omni_core.kinds.vllm_pooling import resize_images

    wide, tall = Image.new("RGB", (200, 100)), Image.new("RGB", (40, 56))
    prompt = {"prompt": "x", "multi_modal_data": {"image": wide}}
    assert resize_images(prompt, 64 * 64)["multi_modal_data"]["image"].size == (96, 32)
    assert resize_images(prompt, None) is prompt
    both = resize_images({"prompt": "x", "multi_modal_data": {"image": [wide, tall]}}, 128 * 128)
    assert [im.size for im in both["multi_modal_data"]["image"]] == [(192, 96), (96, 160)]
    assert prompt["multi_modal_data"]["image"] is wide  # the request's prompt is left alone
    with pytest.raises(ValidationError, match="image_area"):
        VllmArgs.model_validate(stage_args(image_area=100))


def test_image_prompt_goes_before_the_text_once_per_image():
    from omni_core.kinds.vllm_pooling import image_prompts

    two = {"prompt": "edit", "multi_modal_data": {"image": ["a", "b"]}}
    assert (
        image_prompts(two, "Picture {}: <img>")["prompt"] == "Picture 1: <img>Picture 2: <img>edit"
    )
    one = {"prompt": "edit", "multi_modal_data": {"image": "a"}}
    assert image_prompts(one, "Picture {}: <img>")["prompt"] == "Picture 1: <img>edit"
    assert image_prompts(one, None) is one and image_prompts("edit", "P{}") == "edit"
    assert two["prompt"] == "edit"  # the request's prompt is left alone
