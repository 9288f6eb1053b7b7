"""Streaming Qwen3-Omni code2wav: a gap-free chunked decode with a configurable left context.

code2wav is causal with a fixed look-ahead: a decode of ``n`` frames yields
``n * upsample - lookahead`` samples (1920 per 80 ms frame, 555 samples held back by the
decoder's transposed convolutions, whatever the weights). transformers' ``chunked_decode`` keeps
``wav[ctx * upsample:]`` of each chunk and so loses those 555 samples at every chunk boundary.
:func:`stream_decode` decodes ``codes[s - ctx : e]`` for each chunk ``[s, e)`` and keeps the
samples from ``s * upsample - lookahead`` on (the ones the previous chunk could not produce yet):
the pieces join into exactly the whole decode's length, and equal it to float precision once the
left context covers the receptive field (:func:`receptive_field`, docs/models.md). The windows are
the family kit's (:mod:`omni_core.family.windows`); this module gives code2wav's sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from omni_core.family import causal_piece, causal_stream, exact_context


def upsample(code2wav: Any) -> int:
    """Samples per code frame (1920 at 24 kHz: 80 ms)."""
    return int(code2wav.total_upsample)


def lookahead(code2wav: Any) -> int:
    """Samples a decode holds back at its end: each decoder transposed conv of rate r trims r
    samples at its output rate (8*60 + 5*12 + 4*3 + 3*1 = 555 for the real rates)."""
    config = code2wav.config
    total, scale = 0, 1
    for rate in reversed(config.upsample_rates):
        total += rate * scale
        scale *= rate
    return total


def receptive_field(code2wav: Any) -> int:
    """Left context (frames) the pre-transformer's sliding-window attention reaches:
    ``layers * (sliding_window - 1)`` (the convolutions add a few frames; measured in
    docs/models.md). 14 for the tiny model, 568 for the real one (8 layers, window 72)."""
    config = code2wav.config
    return exact_context(int(config.num_hidden_layers), int(config.sliding_window))


def stream_decode(code2wav: Any, codes: Any, chunk: int, left_context: int) -> Iterator[Any]:
    """Decode ``codes`` ``[1, groups, frames]`` in chunks of ``chunk`` frames, each with up to
    ``left_context`` (>= 1) frames of context (the kit's :func:`~omni_core.family.causal_stream`):
    yields waveform pieces ``[1, 1, n]`` whose concatenation has the whole decode's length."""
    import torch

    pieces = causal_stream(
        code2wav, codes, chunk, left_context, upsample(code2wav), lookahead(code2wav)
    )
    with torch.no_grad():
        yield from pieces


def decode_piece(code2wav: Any, codes: Any, start: int, end: int, left_context: int) -> Any:
    """The waveform of frames ``[start, end)`` that the pieces before it did not give yet (the
    kit's :func:`~omni_core.family.causal_piece`)."""
    return causal_piece(
        code2wav, codes, start, end, left_context, upsample(code2wav), lookahead(code2wav)
    )
