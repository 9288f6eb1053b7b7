"""Media content parts of a chat (``input_audio``, ``image_url``) decoded for a stage's prompt.

Audio: base64 WAV (PCM 8/16/32-bit integer or 32-bit float, mono or interleaved channels, mixed
down to mono) → float32 at the stage's sampling rate (linear resampling when the rates differ;
send audio at the model's rate to avoid it). Images: ``data:`` URLs only (the server fetches
nothing), decoded with Pillow to RGB. Every failure is a :class:`RequestError` naming the part.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from typing import Any

from omni_core.errors import RequestError

PCM = {1: ("u1", 128.0, 128.0), 2: ("<i2", 0.0, 32768.0), 4: ("<i4", 0.0, 2147483648.0)}


def _b64(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{where}: not valid base64", param=where) from None


def decode_audio(data: str, fmt: str, rate: int, where: str) -> Any:
    """A base64 WAV → a mono float32 numpy waveform at ``rate`` Hz."""
    import numpy as np

    if fmt != "wav":
        raise RequestError(f"{where}: only 'wav' audio is supported, not '{fmt}'", param=where)
    raw = _b64(data, where)
    try:
        with wave.open(io.BytesIO(raw)) as wav:
            channels, width, src_rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise RequestError(f"{where}: not a readable WAV file ({exc})", param=where) from None
    if width not in PCM or channels < 1 or src_rate < 1:
        raise RequestError(f"{where}: unsupported WAV ({width * 8}-bit samples)", param=where)
    dtype, offset, scale = PCM[width]
    samples = (np.frombuffer(frames, dtype=dtype).astype(np.float32) - offset) / scale
    if not samples.size:
        raise RequestError(f"{where}: the audio is empty", param=where)
    samples = samples[: samples.size - samples.size % channels].reshape(-1, channels).mean(axis=1)
    if src_rate != rate:
        duration = samples.size / src_rate
        target = np.arange(round(duration * rate), dtype=np.float64) / rate
        samples = np.interp(target, np.arange(samples.size) / src_rate, samples)
    return samples.astype(np.float32)


def decode_image(url: str, where: str) -> Any:
    """A ``data:image/...;base64,...`` URL → an RGB Pillow image."""
    from PIL import Image, UnidentifiedImageError

    head, sep, payload = url.partition(",")
    if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
        raise RequestError(
            f"{where}: only base64 'data:image/...' URLs are accepted (the server fetches nothing)",
            param=where,
        )
    try:
        image = Image.open(io.BytesIO(_b64(payload, where)))
        image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise RequestError(f"{where}: not a readable image ({exc})", param=where) from None
    return image.convert("RGB")
