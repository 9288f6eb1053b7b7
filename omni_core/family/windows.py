"""Streaming vocoder windows: a vocoder decoded chunk by chunk as its codes arrive, each chunk
with left context, the pieces joined gap-free into the whole decode's length.

The contract, for a causal vocoder that turns ``n`` code frames into ``n * upsample -
lookahead`` samples (``lookahead``: samples its transposed convolutions hold back at the end,
whatever the weights): :func:`causal_piece` decodes ``codes[..., start - left_context : end]``
and keeps the samples from ``start * upsample - lookahead`` on (the ones the previous piece could
not give yet). The pieces concatenate to exactly the whole decode's length, and

* **exact** (equal to the whole decode within float rounding) once ``left_context`` covers the
  vocoder's receptive field in frames (:func:`exact_context`);
* **bounded error** below it: the family states the bound it measured for its options and proves
  it with the parity harness (:func:`omni_core.testing.parity.check_bounded`), which also shows
  that the bound is not vacuous.

A non-causal vocoder with right context, a cross-fade and receptive-field padding (omni-qwen's
token2wav) keeps its own windows; these are the causal case, which needs none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["causal_piece", "causal_stream", "exact_context"]


def causal_piece(
    decode: Callable[[Any], Any],
    codes: Any,
    start: int,
    end: int,
    left_context: int,
    upsample: int,
    lookahead: int,
) -> Any:
    """The waveform of frames ``[start, end)`` that the pieces before it did not give yet:
    ``decode(codes[..., start - left_context : end])`` from sample ``start * upsample -
    lookahead`` on (all of it for the first piece). ``codes``: ``[..., frames]``."""
    c = max(0, start - left_context)
    wav = decode(codes[..., c:end])
    return wav if start == 0 else wav[..., start * upsample - lookahead - c * upsample :]


def causal_stream(
    decode: Callable[[Any], Any],
    codes: Any,
    chunk: int,
    left_context: int,
    upsample: int,
    lookahead: int,
) -> Iterator[Any]:
    """:func:`causal_piece` for every chunk of ``chunk`` frames of ``codes``: pieces whose
    concatenation has the whole decode's length. ``left_context`` >= 1 (one frame of context
    re-emits the held-back samples)."""
    if chunk < 1 or left_context < 1:
        raise ValueError(f"chunk and left_context must be >= 1, not {chunk} and {left_context}")
    frames = codes.shape[-1]
    for s in range(0, frames, chunk):
        yield causal_piece(
            decode, codes, s, min(s + chunk, frames), left_context, upsample, lookahead
        )


def exact_context(layers: int, window: int, conv_frames: int = 0) -> int:
    """Left context (frames) from which the causal stream is exact: a stack of ``layers``
    sliding-window attention layers of ``window`` frames reaches ``layers * (window - 1)``
    frames back, plus ``conv_frames`` the convolutions add."""
    return layers * (window - 1) + conv_frames
