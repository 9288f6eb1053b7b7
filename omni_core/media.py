"""Media payloads (audio chunks, images) and writers that need no imaging library."""

from __future__ import annotations

import io
import struct
import wave
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class AudioChunk:
    """``samples``: a float32 numpy array in [-1, 1]; mono."""

    samples: Any
    sample_rate: int


@dataclass
class Image:
    """``pixels``: a uint8 numpy array of shape (height, width, 3)."""

    pixels: Any


def pcm16(samples: Any) -> bytes:
    """Float samples in [-1, 1] as little-endian 16-bit PCM."""
    import numpy as np

    return (
        (np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2").tobytes()
    )


IMAGE_OPTIONS = "image"
"""The key of ``SamplingParams.extra`` holding a request's generic image options, which any
image-producing stage kind reads: ``width`` and ``height`` (pixels) and ``steps`` (denoising
steps), each optional. ``omni run --size/--steps`` and ``/v1/images/generations``' ``size`` and
``num_inference_steps`` set them (:func:`image_options`); a kind validates them as it validates
its own options (a bad value fails the request with a 400 naming the field)."""


AUDIO_OPTIONS = "audio"
"""The key of ``SamplingParams.extra`` holding a request's generic audio-output options, which any
audio-producing stage kind may read: ``stream`` (bool, default false: the caller plays the audio
as it arrives, so a stage that can should voice it in pieces as early as it can, possibly
approximating, rather than once the utterance is whole; a stage that cannot ignores it).
``omni serve``'s chat with ``stream: true`` and ``"audio"`` in ``modalities`` sets it, and
``omni run`` for a pipeline with a final audio output (:func:`audio_options`)."""


def audio_options(stream: bool) -> dict[str, bool]:
    """The fields of ``extra[AUDIO_OPTIONS]``."""
    return {"stream": stream}


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def image_options(
    size: str | None = None, steps: int | None = None, *, where: str = "size"
) -> dict[str, int]:
    """The fields of ``extra[IMAGE_OPTIONS]`` for ``size`` (``"WIDTHxHEIGHT"``) and ``steps``.

    A malformed size is a ValueError naming ``where`` (the flag or field it came from)."""
    options: dict[str, int] = {}
    if size is not None:
        width, _, height = size.lower().partition("x")
        if not (_is_number(width) and _is_number(height)):
            raise ValueError(f"{where} {size}: expected WIDTHxHEIGHT, e.g. 256x256")
        options.update(width=int(width), height=int(height))
    if steps is not None:
        options["steps"] = steps
    return options


AUDIO_FORMATS = ("wav", "pcm16")  # what :func:`audio_bytes` writes


def audio_bytes(chunks: list[AudioChunk], fmt: str) -> bytes:
    """Audio chunks as one file of ``fmt``: ``wav`` (16-bit PCM mono WAV) or ``pcm16`` (the same
    samples raw: little-endian 16-bit mono at the chunks' rate, no header)."""
    if fmt == "wav":
        return wav_bytes(chunks)
    if fmt == "pcm16":
        return b"".join(pcm16(c.samples) for c in chunks)
    raise ValueError(f"audio format {fmt!r}: one of {', '.join(AUDIO_FORMATS)}")


def wav_bytes(chunks: list[AudioChunk]) -> bytes:
    """Audio chunks as one 16-bit PCM mono WAV file."""
    if not chunks:
        raise ValueError("no audio to write")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(chunks[0].sample_rate)
        out.writeframes(b"".join(pcm16(c.samples) for c in chunks))
    return buffer.getvalue()


def write_wav(chunks: list[AudioChunk], path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(wav_bytes(chunks))
    return path


class WavStream:
    """A 16-bit PCM mono WAV written piece by piece (``write``), its header valid after every
    piece (``wave`` patches the sizes), so a player can open it while it grows."""

    def __init__(self, path: str | Path, rate: int) -> None:
        self.path = Path(path)
        self.rate = rate
        self.samples = 0
        self._file = self.path.open("wb")
        self._out = wave.open(self._file, "wb")
        self._out.setnchannels(1)
        self._out.setsampwidth(2)
        self._out.setframerate(rate)

    def write(self, chunk: AudioChunk) -> None:
        if chunk.sample_rate != self.rate:
            raise ValueError(
                f"audio at {chunk.sample_rate} Hz cannot continue {self.path} at {self.rate} Hz"
            )
        self._out.writeframes(pcm16(chunk.samples))
        self._file.flush()  # on disk now, header included
        self.samples += len(chunk.samples)

    def close(self) -> None:
        self._out.close()
        self._file.close()


def write_png(image: Image, path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(png_bytes(image))
    return path


def png_bytes(image: Image) -> bytes:
    """An RGB image as a PNG file (zlib + the PNG chunk format; no imaging library)."""
    import numpy as np

    pixels = np.asarray(image.pixels, dtype=np.uint8)
    height, width, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack("!I", len(data)) + body + struct.pack("!I", zlib.crc32(body))

    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    return png + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
