"""``omni serve``'s ``/v1/images/generations`` on the ``qwen-image`` pipeline: the PNG equals
QwenImagePipeline's image for the seed; size, steps, seed and guidance (omni-cfg's override in
the body's ``extra``) reach the stages; a size the VAE refuses is a 400 naming the field."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from omni_core.config.settings import OmniSettings
from omni_core.testing.server import running_server


@pytest.fixture(scope="module")
def server(qi_cache, tiny_qi):
    settings = OmniSettings(cache_dir=qi_cache, startup_timeout_s=300.0, shutdown_timeout_s=5.0)
    with running_server("qwen-image", entry_points=True, settings=settings) as (url, _, _):
        yield url


def post(url: str, **body) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/images/generations", json={"prompt": "a red square", **body}, timeout=120
    )


def pixels(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    (item,) = response.json()["data"]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(item["b64_json"]))).convert("RGB"))


def reference(pipe, size: int, steps: int, **kwargs) -> np.ndarray:
    with torch.no_grad():
        image = pipe(
            prompt="a red square",
            num_inference_steps=steps,
            height=size,
            width=size,
            generator=torch.Generator().manual_seed(9),
            output_type="np",
            **kwargs,
        ).images[0]
    return (image * 255).round().astype(np.uint8)


def test_images_route_equals_the_pipeline_guided_at_the_requested_size(server, pipe):
    body = {"seed": 9, "size": "48x48", "num_inference_steps": 2}
    guidance = {"cfg": {"negative_prompt": "blurry", "guidance_scale": 3.0}}  # omni-cfg's
    got = pixels(post(server, **body, extra=guidance))
    ref = reference(pipe, 48, 2, negative_prompt="blurry", true_cfg_scale=3.0)
    assert got.shape == (48, 48, 3) and np.abs(got.astype(int) - ref.astype(int)).max() <= 1


def test_bad_size_is_a_400_naming_it(server):
    bad = post(server, size="40x40")
    assert bad.status_code == 400 and "extra['image'].height" in bad.text
    big = post(server, size="2048x2048")  # over the stage's max_pixels (1024x1024)
    assert big.status_code == 400 and big.json()["error"]["message"].endswith(
        "2048x2048 = 4194304 pixels, at most 1048576 (stage 'dit' engine_args.max_pixels)"
    )
    bad = post(server, size="large")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "size"


def test_n_images_differ_child_i_samples_with_seed_plus_i(server):
    body = {"size": "32x32", "num_inference_steps": 2}

    def images(response: httpx.Response) -> list[np.ndarray]:
        assert response.status_code == 200, response.text
        return [
            np.asarray(Image.open(io.BytesIO(base64.b64decode(d["b64_json"]))).convert("RGB"))
            for d in response.json()["data"]
        ]

    first, second = images(post(server, seed=9, n=2, **body))
    assert (first == pixels(post(server, seed=9, **body))).all()  # child 0: the seed itself
    assert (second == pixels(post(server, seed=10, **body))).all()  # child 1: seed + 1
    assert not (first == second).all()
    a, b = images(post(server, n=2, **body))  # unseeded: a random base seed, still n images
    assert not (a == b).all()
