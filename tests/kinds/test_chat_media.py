"""Decoding of chat media parts (WAV audio, data-URL images) for multimodal stage prompts."""

from __future__ import annotations

import base64
import io
import os
import wave

import numpy as np
import pytest
from PIL import Image

from omni_core.chat_media import (
    EXTENSIBLE_TAG,
    MediaBudget,
    audio_file_part,
    decode_audio,
    decode_image,
    image_file_part,
)
from omni_core.errors import RequestError
from tests.media_kit import b64, blank_png, chunk, data_url, fmt_chunk, png, riff


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


# --- budgets, checked from the header before decoding (issue 24) ---------------------------------

SMALL = MediaBudget(audio_seconds=2.0, audio_bytes=1 << 20, image_pixels=1 << 20, file_bytes=4096)


def pcm(seconds: float, rate: int, channels: int = 1) -> bytes:
    return riff(fmt_chunk(1, channels, rate, 16), b"\1\0" * round(seconds * rate) * channels)


def refused(raw: bytes, needle: str, status: int, budget: MediaBudget = SMALL, rate: int = 16000):
    with pytest.raises(RequestError, match=needle) as caught:
        decode_audio(b64(raw), "wav", rate, "messages[1].content[0]", budget)
    assert caught.value.param == "messages[1].content[0]"
    assert caught.value.status_code == status
    assert str(caught.value).startswith("messages[1].content[0]: ")


@pytest.mark.parametrize("rate", [1, 7999, 192001, 2**32 - 1])
def test_a_sampling_rate_out_of_range_is_a_400_before_resampling(rate):
    # a 1 Hz header once made 2.9 KB of audio resample into 0.6 GiB
    raw = riff(fmt_chunk(1, 1, rate, 16), b"\0\1" * 1000)
    refused(raw, f"sampling rate is {rate} Hz; 8000 to 192000 Hz are accepted", 400)


def test_too_many_channels_is_a_400():
    refused(pcm(0.01, 16000, channels=17), "17 channels; 1 to 16 are accepted", 400)


def test_duration_and_decoded_bytes_are_bounded_before_decoding(monkeypatch):
    refused(pcm(2.5, 8000), r"lasts 2\.5 s; the limit is 2 s \(OMNI_MAX_AUDIO_SECONDS\)", 413)
    decode_audio(b64(pcm(2.0, 8000)), "wav", 8000, "p", SMALL)  # at the limit: fine
    # 1.5 s of 8 channels at 48 kHz: 2.3 MB of float32 before the mix-down
    refused(pcm(1.5, 48000, channels=8), r"decoded, the audio is 2304000 bytes", 413)
    # 1 s at 8 kHz is 32 KB decoded, but 768 KB resampled to 192 kHz; 1.5 s of it 1.1 MB
    decode_audio(b64(pcm(1.0, 8000)), "wav", 192000, "p", SMALL)
    refused(pcm(1.5, 8000), "resampled to 192000 Hz the audio is 1152000 bytes", 413, rate=192000)
    # the budget's default comes from the settings
    monkeypatch.setenv("OMNI_MAX_AUDIO_SECONDS", "1")
    with pytest.raises(RequestError, match="OMNI_MAX_AUDIO_SECONDS") as caught:
        decode_audio(b64(pcm(1.5, 8000)), "wav", 8000, "p")
    assert caught.value.status_code == 413


def test_float_and_extensible_wavs_are_decoded():
    values = np.array([0.5, -0.25, 1.5, -3.0], dtype=np.float32)  # outside [-1, 1]: clipped
    want = [0.5, -0.25, 1.0, -1.0]
    for fmt, data in [
        (fmt_chunk(3, 1, 16000, 32), values.tobytes()),
        (fmt_chunk(3, 1, 16000, 64), values.astype("<f8").tobytes()),
        (fmt_chunk(EXTENSIBLE_TAG, 1, 16000, 32, sub=3), values.tobytes()),
        (fmt_chunk(EXTENSIBLE_TAG, 2, 16000, 32, sub=3), np.repeat(values, 2).tobytes()),
    ]:
        raw = riff(fmt, data, before=chunk(b"LIST", b"INFOjunk!"))  # odd size: padded
        np.testing.assert_allclose(decode_audio(b64(raw), "wav", 16000, "p"), want)
    pcm16 = np.array([16384, -32768], dtype="<i2").tobytes()
    raw = riff(fmt_chunk(EXTENSIBLE_TAG, 1, 16000, 16, sub=1), pcm16)
    np.testing.assert_allclose(decode_audio(b64(raw), "wav", 16000, "p"), [0.5, -1.0])
    # a data chunk claiming more than the file holds (a streaming writer's) is cut to the file
    raw = riff(fmt_chunk(3, 1, 16000, 32), values.tobytes(), data_size=0xFFFFFFFF)
    assert decode_audio(b64(raw), "wav", 16000, "p").size == 4


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (riff(fmt_chunk(3, 1, 16000, 32), np.float32([0, np.nan]).tobytes()), "NaN or infinite"),
        (riff(fmt_chunk(3, 1, 16000, 16), b"\0" * 4), r"unsupported WAV \(16-bit float"),
        (riff(fmt_chunk(1, 1, 16000, 24), b"\0" * 6), r"unsupported WAV \(24-bit integer"),
        (riff(fmt_chunk(2, 1, 16000, 4), b"\0" * 4), r"format tag 2; PCM or IEEE float only"),
        (riff(fmt_chunk(EXTENSIBLE_TAG, 1, 16000, 32, sub=3)[:-1] + b"?", b"\0" * 4), "subformat"),
        (riff(fmt_chunk(1, 2, 16000, 16, align=3), b"\0" * 6), "block align 3 does not match"),
        (riff(fmt_chunk(1, 1, 16000, 16), b""), "the audio is empty"),
        (riff(fmt_chunk(1, 1, 48000, 16), b"\1\0"), "shorter than one sample at 16000 Hz"),
        (b"RIFF\0\0\0\0WAVE" + chunk(b"data", b"\0\0") + chunk(b"fmt ", b"x" * 16), "before the"),
        (b"RIFF\0\0\0\0WAVE" + chunk(b"fmt ", fmt_chunk(1, 1, 16000, 16)), "no data chunk"),
        (b"RIFF\0\0\0\0WAVE" + chunk(b"fmt ", b"\1\0", size=40), "fmt chunk is cut short"),
        (b"RIFF\0\0\0\0AVI ", r"not a WAVE file"),
    ],
)
def test_malformed_wavs_are_one_400_naming_the_part(raw, needle):
    refused(raw, needle, 400)


def test_an_image_over_the_pixel_budget_is_a_413_before_any_pixel_is_decoded(monkeypatch):
    from PIL import ImageFile

    def no_decoding(self):
        raise AssertionError("decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    # 9000x9000 in a few bytes (the pixel data cut short: the header alone is checked)
    for width, height, needle in [
        (9000, 9000, r"9000x9000 \(81000000 pixels\); the limit is 1048576 pixels"),
        (1025, 1024, r"1025x1024 \(1049600 pixels\)"),
        (30000, 30000, "declares too many pixels; the limit is 1048576"),  # past Pillow's own
    ]:
        with pytest.raises(RequestError, match=needle) as caught:
            decode_image(data_url(png(width, height, b"x")), "messages[0].content[1]", SMALL)
        assert caught.value.status_code == 413 and caught.value.param == "messages[0].content[1]"
        assert "OMNI_MAX_IMAGE_PIXELS" in str(caught.value)
    monkeypatch.undo()
    assert decode_image(data_url(blank_png(1024, 1024)), "p", SMALL).size == (1024, 1024)
    monkeypatch.setenv("OMNI_MAX_IMAGE_PIXELS", str(1 << 16))
    with pytest.raises(RequestError, match="257x256"):
        decode_image(data_url(blank_png(257, 256)), "p")


def test_only_common_image_formats_are_opened(tmp_path):
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(RequestError, match="cannot identify image file"):
        decode_image(data_url(eps, "eps"), "p")


def test_media_files_must_be_regular_and_within_the_file_budget(tmp_path):
    fifo = tmp_path / "fifo.wav"
    os.mkfifo(fifo)  # nobody writes it: reading it would wait forever
    for path in ("/dev/zero", fifo):
        for make in (audio_file_part, image_file_part):
            with pytest.raises(RequestError, match=r"cannot read the file \(not a regular file\)"):
                make(path, f"--audio {path}", SMALL)
    big = tmp_path / "big.wav"
    big.write_bytes(pcm(0.5, 8000))  # 8 KB
    with pytest.raises(RequestError, match=r"too large; the limit is 4096 bytes") as caught:
        audio_file_part(big, "--audio big.wav", SMALL)
    assert caught.value.status_code == 413
    small = tmp_path / "small.wav"
    small.write_bytes(pcm(0.1, 8000))
    assert audio_file_part(small, "--audio small.wav", SMALL)["type"] == "input_audio"
