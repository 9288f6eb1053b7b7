"""Decoding of chat media parts (WAV audio, data-URL images) for multimodal stage prompts."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest
from PIL import Image

from omni_core.chat_media import decode_audio, decode_image
from omni_core.errors import RequestError


def wav(samples: np.ndarray, rate: int, width: int = 2, channels: int = 1) -> str:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return base64.b64encode(out.getvalue()).decode()


def test_pcm16_stereo_is_mixed_down_and_scaled():
    left = np.array([16384, -32768, 0, 32767], dtype="<i2")
    right = np.array([16384, 0, 0, -32767], dtype="<i2")
    stereo = np.stack([left, right], axis=1).reshape(-1)
    got = decode_audio(wav(stereo, 16000, channels=2), "wav", 16000, "p")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [0.5, -0.5, 0.0, 0.0], atol=1e-4)


def test_8bit_audio_is_centred_and_other_rates_are_resampled():
    eight = np.array([128, 255, 0, 128], dtype="u1")
    np.testing.assert_allclose(
        decode_audio(wav(eight, 16000, width=1), "wav", 16000, "p"), [0, 127 / 128, -1, 0]
    )
    tone = (np.sin(np.arange(8000) / 8000 * 2 * np.pi * 50) * 20000).astype("<i2")
    up = decode_audio(wav(tone, 8000), "wav", 16000, "p")
    assert up.size == 16000  # one second either way
    np.testing.assert_allclose(up[::2], tone.astype(np.float32) / 32768, atol=1e-3)


@pytest.mark.parametrize(
    ("data", "fmt", "needle"),
    [
        ("@@", "wav", "not valid base64"),
        ("aGVsbG8=", "wav", "not a readable WAV"),
        ("aGVsbG8=", "mp3", "only 'wav'"),
    ],
)
def test_bad_audio_names_the_part(data, fmt, needle):
    with pytest.raises(RequestError, match=needle) as caught:
        decode_audio(data, fmt, 16000, "messages[0].content[2]")
    assert caught.value.param == "messages[0].content[2]"


def test_images_come_from_data_urls_only():
    out = io.BytesIO()
    Image.new("L", (3, 2), 200).save(out, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    picture = decode_image(url, "p")
    assert (
        picture.mode == "RGB" and picture.size == (3, 2) and picture.getpixel((0, 0)) == (200,) * 3
    )
    for bad, needle in [
        ("https://x/y.png", "only base64"),
        ("data:image/png;base64,aGk=", "not a readable image"),
    ]:
        with pytest.raises(RequestError, match=needle):
            decode_image(bad, "p")
