"""Media content parts of a chat (``input_audio``, ``image_url``) decoded for a stage's prompt.

Audio: base64 WAV (PCM 8/16/32-bit integer or 32-bit float, mono or interleaved channels, mixed
down to mono) → float32 at the stage's sampling rate (linear resampling when the rates differ;
send audio at the model's rate to avoid it). Images: ``data:`` URLs only (the server fetches
nothing), decoded with Pillow to RGB. Every failure is a :class:`RequestError` naming the part.
:func:`audio_file_part` / :func:`image_file_part` make such parts from files (``omni run``'s
``--audio`` / ``--image``), checked when made.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from pathlib import Path
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
    samples, src_rate = read_wav(_b64(data, where), where)
    if src_rate != rate:
        duration = samples.size / src_rate
        target = np.arange(round(duration * rate), dtype=np.float64) / rate
        samples = np.interp(target, np.arange(samples.size) / src_rate, samples)
    return samples.astype(np.float32)


def read_wav(raw: bytes, where: str) -> tuple[Any, int]:
    """A WAV file's bytes → (mono float32 samples, their sampling rate)."""
    import numpy as np

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
    return samples, src_rate


def decode_image(url: str, where: str) -> Any:
    """A ``data:image/...;base64,...`` URL → an RGB Pillow image."""
    head, sep, payload = url.partition(",")
    if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
        raise RequestError(
            f"{where}: only base64 'data:image/...' URLs are accepted (the server fetches nothing)",
            param=where,
        )
    return _open_image(_b64(payload, where), where).convert("RGB")


def _open_image(raw: bytes, where: str) -> Any:
    """Image bytes → a loaded Pillow image (its ``format`` says which)."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise RequestError(f"{where}: not a readable image ({exc})", param=where) from None
    return image


def _read(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise RequestError(f"{where}: cannot read the file ({reason})", param=where) from None


def audio_file_part(path: str | Path, where: str) -> dict[str, Any]:
    """A WAV file as an ``input_audio`` content part, checked now (a RequestError naming
    ``where``, e.g. the CLI flag and the file, if it cannot be read or is not a usable WAV)."""
    raw = _read(Path(path), where)
    read_wav(raw, where)
    data = base64.b64encode(raw).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def image_file_part(path: str | Path, where: str) -> dict[str, Any]:
    """An image file (any format Pillow reads) as an ``image_url`` part with a base64 data URL of
    its type, checked now (a RequestError naming ``where``)."""
    raw = _read(Path(path), where)
    kind = (_open_image(raw, where).format or "png").lower()
    url = f"data:image/{kind};base64,{base64.b64encode(raw).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}
