"""Media content parts of a chat (``input_audio``, ``image_url``) decoded for a stage's prompt.

Audio: base64 WAV (PCM 8/16/32-bit integer or 32/64-bit IEEE float, plain or
WAVE_FORMAT_EXTENSIBLE, mono or interleaved channels, mixed down to mono) → float32 at the stage's
sampling rate (linear resampling when the rates differ; send audio at the model's rate to avoid
it). Images: ``data:`` URLs only (the server fetches nothing), decoded with Pillow to RGB. Every
failure is a :class:`RequestError` naming the part.

Every input has a budget (:class:`MediaBudget`, from the ``OMNI_MAX_AUDIO_*`` /
``OMNI_MAX_IMAGE_PIXELS`` settings) checked from its header *before* it is decoded: audio's
sampling rate (:data:`AUDIO_RATES`), channels (:data:`MAX_CHANNELS`), duration and decoded bytes
before and after resampling; an image's declared pixels. Over a size budget is a 413, a value out
of range a 400, each naming the part and the limit.

:func:`audio_file_part` / :func:`image_file_part` make such parts from files (``omni run``'s
``--audio`` / ``--image``), checked when made: regular files only, at most
``OMNI_MAX_MEDIA_FILE_BYTES``.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_core.errors import RequestError

AUDIO_RATES = (8000, 192000)
"""The sampling rates (Hz, inclusive) a WAV part may declare."""
MAX_CHANNELS = 16
"""The most interleaved channels a WAV part may declare."""
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
"""The image formats Pillow may open for a part (no EPS/PDF, which would run Ghostscript)."""

PCM_TAG, FLOAT_TAG, EXTENSIBLE_TAG = 1, 3, 0xFFFE
# (format tag, bits) → numpy dtype, offset, scale: sample = (raw - offset) / scale
SAMPLES = {
    (PCM_TAG, 8): ("u1", 128.0, 128.0),
    (PCM_TAG, 16): ("<i2", 0.0, 32768.0),
    (PCM_TAG, 32): ("<i4", 0.0, 2147483648.0),
    (FLOAT_TAG, 32): ("<f4", 0.0, 1.0),
    (FLOAT_TAG, 64): ("<f8", 0.0, 1.0),
}
# KSDATAFORMAT_SUBTYPE_*: the subformat GUID of WAVE_FORMAT_EXTENSIBLE after its 2-byte tag
GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")
UNREADABLE = (OSError, SyntaxError, ValueError, struct.error)  # what Pillow raises on bad bytes
RESAMPLE_BLOCK = 1 << 16  # output samples per interpolation step (bounds its temporaries)


@dataclass(frozen=True)
class MediaBudget:
    """What one media part may cost (see the module's docstring)."""

    audio_seconds: float
    audio_bytes: int
    image_pixels: int
    file_bytes: int

    @classmethod
    def from_settings(cls, settings: Any = None) -> MediaBudget:
        """From an :class:`~omni_core.config.settings.OmniSettings` (default: the environment)."""
        if settings is None:
            from omni_core.config.settings import OmniSettings

            settings = OmniSettings()
        return cls(
            audio_seconds=settings.max_audio_seconds,
            audio_bytes=settings.max_audio_bytes,
            image_pixels=settings.max_image_pixels,
            file_bytes=settings.max_media_file_bytes,
        )


def _too_large(where: str, what: str, limit: str, setting: str) -> RequestError:
    return RequestError(
        f"{where}: {what}; the limit is {limit} ({setting})", param=where, status_code=413
    )


def _b64(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{where}: not valid base64", param=where) from None


def decode_audio(
    data: str, fmt: str, rate: int, where: str, budget: MediaBudget | None = None
) -> Any:
    """A base64 WAV → a mono float32 numpy waveform at ``rate`` Hz."""
    if fmt != "wav":
        raise RequestError(f"{where}: only 'wav' audio is supported, not '{fmt}'", param=where)
    budget = budget or MediaBudget.from_settings()
    samples, src_rate = read_wav(_b64(data, where), where, budget)
    if src_rate == rate:
        return samples
    out = (samples.size * rate + src_rate // 2) // src_rate
    if not out:
        raise RequestError(
            f"{where}: the audio is shorter than one sample at {rate} Hz", param=where
        )
    if out * 4 > budget.audio_bytes:
        raise _too_large(
            where,
            f"resampled to {rate} Hz the audio is {out * 4} bytes",
            f"{budget.audio_bytes} bytes",
            "OMNI_MAX_AUDIO_BYTES",
        )
    return _resample(samples, src_rate, rate, out)


def _resample(samples: Any, src_rate: int, rate: int, size: int) -> Any:
    """Linear interpolation of ``samples`` at ``rate``, ``size`` outputs, block by block."""
    import numpy as np

    out: Any = np.empty(size, dtype=np.float32)
    last = samples.size - 1
    step = src_rate / rate
    for start in range(0, size, RESAMPLE_BLOCK):
        end = min(start + RESAMPLE_BLOCK, size)
        pos = np.arange(start, end, dtype=np.float64) * step
        left = np.minimum(pos.astype(np.int64), last)
        frac = (pos - left).astype(np.float32)
        here = samples[left]
        out[start:end] = here + (samples[np.minimum(left + 1, last)] - here) * frac
    return out


@dataclass(frozen=True)
class WavFormat:
    """A WAV file's ``fmt `` chunk, reduced to what decoding needs."""

    tag: int  # PCM_TAG or FLOAT_TAG (an extensible file's subformat)
    channels: int
    rate: int
    bits: int
    block_align: int


def parse_wav(raw: bytes, where: str) -> tuple[WavFormat, memoryview]:
    """A WAV file's RIFF chunks → its format and its sample bytes (a view, no copy).

    Strict about the format (a ``fmt `` chunk before ``data``, consistent block alignment);
    a ``data`` chunk longer than the file is cut to the file (as streaming writers leave it)."""

    def bad(reason: str) -> RequestError:
        return RequestError(f"{where}: not a readable WAV file ({reason})", param=where)

    if len(raw) < 4 or raw[:4] != b"RIFF":
        raise bad("file does not start with RIFF id")
    if raw[8:12] != b"WAVE":
        raise bad("not a WAVE file")
    view = memoryview(raw)
    fmt: WavFormat | None = None
    pos = 12
    while pos + 8 <= len(raw):
        chunk, size = bytes(view[pos : pos + 4]), int.from_bytes(view[pos + 4 : pos + 8], "little")
        body = pos + 8
        if chunk == b"fmt ":
            if fmt is not None:
                raise bad("two fmt chunks")
            if body + size > len(raw):
                raise bad("the fmt chunk is cut short")
            fmt = _fmt(bytes(view[body : body + min(size, 40)]), bad, where)
        elif chunk == b"data":
            if fmt is None:
                raise bad("the data chunk comes before the fmt chunk")
            return fmt, view[body : min(body + size, len(raw))]
        pos = body + size + (size & 1)
    raise bad("no fmt chunk" if fmt is None else "no data chunk")


def _fmt(body: bytes, bad: Any, where: str) -> WavFormat:
    if len(body) < 16:
        raise bad("the fmt chunk is too short")
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", body)
    if tag == EXTENSIBLE_TAG:
        if len(body) < 40:
            raise bad("the WAVE_FORMAT_EXTENSIBLE fmt chunk is too short")
        if body[26:40] != GUID_TAIL:
            raise bad("unknown WAVE_FORMAT_EXTENSIBLE subformat")
        tag = int.from_bytes(body[24:26], "little")
    if tag not in (PCM_TAG, FLOAT_TAG):
        raise RequestError(
            f"{where}: unsupported WAV (format tag {tag}; PCM or IEEE float only)", param=where
        )
    if (tag, bits) not in SAMPLES:
        kind = "float" if tag == FLOAT_TAG else "integer"
        raise RequestError(f"{where}: unsupported WAV ({bits}-bit {kind} samples)", param=where)
    if not 1 <= channels <= MAX_CHANNELS:
        raise RequestError(
            f"{where}: the WAV has {channels} channels; 1 to {MAX_CHANNELS} are accepted",
            param=where,
        )
    if not AUDIO_RATES[0] <= rate <= AUDIO_RATES[1]:
        raise RequestError(
            f"{where}: the WAV's sampling rate is {rate} Hz; {AUDIO_RATES[0]} to "
            f"{AUDIO_RATES[1]} Hz are accepted",
            param=where,
        )
    if block_align != channels * bits // 8:
        raise bad(f"block align {block_align} does not match {channels} x {bits}-bit samples")
    return WavFormat(tag, channels, rate, bits, block_align)


def read_wav(raw: bytes, where: str, budget: MediaBudget | None = None) -> tuple[Any, int]:
    """A WAV file's bytes → (mono float32 samples, their sampling rate), within ``budget``."""
    import numpy as np

    budget = budget or MediaBudget.from_settings()
    fmt, data = parse_wav(raw, where)
    frames = len(data) // fmt.block_align
    if not frames:
        raise RequestError(f"{where}: the audio is empty", param=where)
    if frames > budget.audio_seconds * fmt.rate:
        raise _too_large(
            where,
            f"the audio lasts {frames / fmt.rate:.1f} s",
            f"{budget.audio_seconds:g} s",
            "OMNI_MAX_AUDIO_SECONDS",
        )
    if frames * fmt.channels * 4 > budget.audio_bytes:
        raise _too_large(
            where,
            f"decoded, the audio is {frames * fmt.channels * 4} bytes",
            f"{budget.audio_bytes} bytes",
            "OMNI_MAX_AUDIO_BYTES",
        )
    dtype, offset, scale = SAMPLES[(fmt.tag, fmt.bits)]
    raw_samples = np.frombuffer(data, dtype=dtype, count=frames * fmt.channels)
    if fmt.tag == FLOAT_TAG and not np.isfinite(raw_samples).all():
        raise RequestError(f"{where}: the audio has NaN or infinite samples", param=where)
    with np.errstate(over="ignore"):  # a float64 past float32's range: inf, clipped next
        samples = raw_samples.astype(np.float32)
    if fmt.tag == FLOAT_TAG:
        np.clip(samples, -1.0, 1.0, out=samples)
    else:
        samples -= offset
        samples /= scale
    if fmt.channels > 1:
        samples = samples.reshape(-1, fmt.channels).mean(axis=1, dtype=np.float32)
    return samples, fmt.rate


def decode_image(url: str, where: str, budget: MediaBudget | None = None) -> Any:
    """A ``data:image/...;base64,...`` URL → an RGB Pillow image."""
    head, sep, payload = url.partition(",")
    if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
        raise RequestError(
            f"{where}: only base64 'data:image/...' URLs are accepted (the server fetches nothing)",
            param=where,
        )
    return _open_image(_b64(payload, where), where, budget).convert("RGB")


def _open_image(raw: bytes, where: str, budget: MediaBudget | None = None) -> Any:
    """Image bytes → a loaded Pillow image (its ``format`` says which), its declared size
    checked against the budget before any pixel is decoded."""
    from PIL import Image, UnidentifiedImageError

    limit = (budget or MediaBudget.from_settings()).image_pixels
    try:
        image = Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS)
    except Image.DecompressionBombError:  # Pillow's own bound, past ours: from the header too
        raise _too_large(
            where, "the image declares too many pixels", f"{limit} pixels", "OMNI_MAX_IMAGE_PIXELS"
        ) from None
    except UnidentifiedImageError:  # Pillow's message names its BytesIO object, not the input
        formats = ", ".join(IMAGE_FORMATS)
        raise RequestError(
            f"{where}: not a readable image (cannot identify image file: not one of {formats})",
            param=where,
        ) from None
    except UNREADABLE as exc:
        raise RequestError(f"{where}: not a readable image ({exc})", param=where) from None
    width, height = image.size
    if width * height > limit:
        raise _too_large(
            where,
            f"the image is {width}x{height} ({width * height} pixels)",
            f"{limit} pixels",
            "OMNI_MAX_IMAGE_PIXELS",
        )
    try:
        image.load()
    except UNREADABLE as exc:
        raise RequestError(f"{where}: not a readable image ({exc})", param=where) from None
    return image


def _read(path: Path, where: str, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit`` (a FIFO or a device would hang or never end)."""

    def refuse(reason: str) -> RequestError:
        return RequestError(f"{where}: cannot read the file ({reason})", param=where)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO must not wait
    except OSError as exc:
        raise refuse(exc.strerror or type(exc).__name__) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise refuse("Is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise refuse("not a regular file")
        if info.st_size > limit:
            raise _too_large(
                where, "the file is too large", f"{limit} bytes", "OMNI_MAX_MEDIA_FILE_BYTES"
            )
        with os.fdopen(os.dup(fd), "rb") as file:
            raw = file.read(limit + 1)
    except OSError as exc:
        raise refuse(exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise _too_large(
            where, "the file is too large", f"{limit} bytes", "OMNI_MAX_MEDIA_FILE_BYTES"
        )
    return raw


def audio_file_part(
    path: str | Path, where: str, budget: MediaBudget | None = None
) -> dict[str, Any]:
    """A WAV file as an ``input_audio`` content part, checked now (a RequestError naming
    ``where``, e.g. the CLI flag and the file, if it cannot be read or is not a usable WAV)."""
    budget = budget or MediaBudget.from_settings()
    raw = _read(Path(path), where, budget.file_bytes)
    read_wav(raw, where, budget)
    data = base64.b64encode(raw).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def image_file_part(
    path: str | Path, where: str, budget: MediaBudget | None = None
) -> dict[str, Any]:
    """An image file (:data:`IMAGE_FORMATS`) as an ``image_url`` part with a base64 data URL of
    its type, checked now (a RequestError naming ``where``)."""
    budget = budget or MediaBudget.from_settings()
    raw = _read(Path(path), where, budget.file_bytes)
    kind = (_open_image(raw, where, budget).format or "png").lower()
    url = f"data:image/{kind};base64,{base64.b64encode(raw).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}
