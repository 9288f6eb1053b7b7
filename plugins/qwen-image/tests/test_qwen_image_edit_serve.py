"""``omni serve``'s ``/v1/images/edits`` on the ``qwen-image-edit`` pipeline: the official
``openai`` client's ``images.edit`` gets a PNG of the requested size (equal to the pipeline's edit
for the seed); a mask, a file that is not an image, an image over the pixel budget and a body
that is not a form are 400/413 naming the part."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
from PIL import Image

from omni_core.config.settings import OmniSettings
from omni_core.testing.server import running_server

MAX_PIXELS = 256 * 256  # the server's OMNI_MAX_IMAGE_PIXELS here


@pytest.fixture(scope="module")
def server(qi_cache, tiny_qie):
    settings = OmniSettings(
        cache_dir=qi_cache,
        startup_timeout_s=300.0,
        shutdown_timeout_s=5.0,
        max_image_pixels=MAX_PIXELS,
    )
    import omni_cfg.plugin
    import omni_qwen_image.plugin

    plugins = [("qwen-image", omni_qwen_image.plugin), ("cfg", omni_cfg.plugin)]  # only these
    with running_server("qwen-image-edit", plugins=plugins, settings=settings) as (url, _, _):
        yield url


def png(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.RandomState(seed)
    out = io.BytesIO()
    Image.fromarray((rng.rand(height, width, 3) * 255).astype(np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_openai_client_images_edit_returns_a_png_of_the_requested_size(server):
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none")
    model = client.models.list().data[0].id
    result = client.images.edit(
        model=model,
        image=("in.png", png(32, 32), "image/png"),
        prompt="make it red",
        size="48x32",  # type: ignore[arg-type]  (OpenAI's sizes are large; any WxH here)
        n=2,
        response_format="b64_json",
    )
    assert len(result.data) == 2
    raw = [base64.b64decode(item.b64_json or "") for item in result.data]
    assert all(r.startswith(b"\x89PNG\r\n\x1a\n") for r in raw)
    images = [np.asarray(Image.open(io.BytesIO(r))) for r in raw]
    assert [im.shape for im in images] == [(32, 48, 3)] * 2
    assert not (images[0] == images[1]).all()  # children sample with seed + i
    # several images in one request (image[]) are refused by the Edit (one-image) pipeline
    with pytest.raises(openai.BadRequestError, match=r"2 input images"):
        client.images.edit(
            model=model,
            image=[("a.png", png(32, 32), "image/png"), ("b.png", png(32, 32, 1), "image/png")],
            prompt="make it red",
        )


def post(url: str, files, data=None, **kwargs) -> httpx.Response:
    data = {"prompt": "make it red", **(data or {})}
    return httpx.post(f"{url}/v1/images/edits", files=files, data=data, timeout=120, **kwargs)


def test_bad_uploads_are_400_or_413_naming_the_part(server):
    mask = post(server, {"image": ("a.png", png(32, 32)), "mask": ("m.png", png(32, 32))})
    assert mask.status_code == 400 and mask.json()["error"]["param"] == "mask"
    text = post(server, {"image": ("a.png", b"not an image at all")})
    error = text.json()["error"]
    assert text.status_code == 400 and error["param"] == "image"
    assert error["message"].startswith("image: not a readable image")
    blank = io.BytesIO()
    Image.new("RGB", (257, 256)).save(blank, format="PNG")
    big = post(server, {"image": ("a.png", blank.getvalue())})  # 65792 pixels > 65536
    error = big.json()["error"]
    assert big.status_code == 413 and error["param"] == "image"
    assert "257x256 (65792 pixels)" in error["message"]
    assert "OMNI_MAX_IMAGE_PIXELS" in error["message"]
    files = [("image[]", ("a.png", png(32, 32))), ("image[]", ("b.png", b"junk"))]
    second = post(server, files)
    assert second.status_code == 400 and second.json()["error"]["param"] == "image[1]"
    no_image = httpx.post(f"{server}/v1/images/edits", files={"prompt": (None, "x")}, timeout=60)
    assert no_image.status_code == 400 and no_image.json()["error"]["param"] == "image"
    garbage = httpx.post(
        f"{server}/v1/images/edits",
        content=b'--zz\r\nContent-Disposition: form-data; name="image"; filename="a',
        headers={"content-type": "multipart/form-data; boundary=zz"},
        timeout=60,
    )
    assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
    as_json = httpx.post(f"{server}/v1/images/edits", json={"prompt": "x"}, timeout=60)
    assert as_json.status_code == 400 and "multipart/form-data" in as_json.text
    bad_format = post(server, {"image": ("a.png", png(32, 32))}, data={"output_format": "gif"})
    assert bad_format.status_code == 400 and bad_format.json()["error"]["param"] == "output_format"
