"""PCM16 decoding/encoding and resampling (linear interpolation: good enough for speech I/O)."""

from __future__ import annotations

from typing import Any

import numpy as np

from omni_duplex.errors import DuplexError


def decode_pcm16(data: bytes) -> Any:
    """pcm16 little-endian mono → float32 samples in [-1, 1]."""
    if len(data) % 2:
        raise DuplexError("invalid_audio", "pcm16 audio must have an even number of bytes")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def encode_pcm16(samples: Any) -> bytes:
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


def resample(samples: Any, src_rate: int, dst_rate: int) -> Any:
    samples = np.asarray(samples, dtype=np.float32)
    if src_rate == dst_rate or samples.size == 0:
        return samples
    n_out = max(1, round(samples.size * dst_rate / src_rate))
    src_t = np.arange(samples.size, dtype=np.float64) / src_rate
    dst_t = np.arange(n_out, dtype=np.float64) / dst_rate
    return np.interp(dst_t, src_t, samples).astype(np.float32)


def duration_ms(n_samples: int, rate: int) -> float:
    return 1000.0 * n_samples / rate
