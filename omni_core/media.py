"""Media payloads (audio chunks, images) and writers that need no imaging library."""

from __future__ import annotations

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


def write_wav(chunks: list[AudioChunk], path: str | Path) -> Path:
    """Concatenate audio chunks into a 16-bit PCM mono WAV file."""
    import numpy as np

    if not chunks:
        raise ValueError("no audio to write")
    rate = chunks[0].sample_rate
    samples = np.concatenate([np.asarray(c.samples, dtype=np.float32) for c in chunks])
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    path = Path(path)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def write_png(image: Image, path: str | Path) -> Path:
    """Write an RGB image as a PNG (zlib + the PNG chunk format; no imaging library)."""
    import numpy as np

    pixels = np.asarray(image.pixels, dtype=np.uint8)
    height, width, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack("!I", len(data)) + body + struct.pack("!I", zlib.crc32(body))

    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    path = Path(path)
    path.write_bytes(png)
    return path
