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

A non-causal decoder (omni-qwen's token2wav: a DiT, then a convolutional vocoder) streams with
windows of left **and** right context (:func:`context_window`), a linear **cross-fade** over the
seam with the previous window's prediction of the same frames (:func:`crossfade`), and a
convolutional vocoder rendered with **receptive-field padding** on both sides
(:func:`receptive_field` measures it; :func:`padded_render` uses it), which makes the
vocoder's part exact given the same features; the bounded error is the windowed decoder's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "causal_piece",
    "causal_stream",
    "context_window",
    "crossfade",
    "exact_context",
    "padded_render",
    "receptive_field",
]


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


def context_window(
    start: int, chunk: int, left: int, right: int, frames: int
) -> tuple[int, int, int]:
    """``(lo, end, hi)``: the chunk ``[start, end)`` of up to ``chunk`` frames and the window
    ``[lo, hi)`` decoded for it, ``left`` frames before and ``right`` after, clipped to the
    ``frames`` known."""
    end = min(frames, start + chunk)
    return max(0, start - left), end, min(frames, end + right)


def crossfade(tail: Any, core: Any) -> Any:
    """``core`` (``[..., frames]``, a tensor, changed in place and returned) with its first
    ``k = min(len(tail), len(core))`` frames blended linearly from ``tail`` (the previous
    window's prediction of them) to its own: weights ``(i + 0.5) / k`` for ``core``."""
    import torch

    k = min(tail.shape[-1], core.shape[-1])
    ramp = (torch.arange(k, dtype=core.dtype) + 0.5) / k
    core[..., :k] = tail[..., :k] * (1 - ramp) + core[..., :k] * ramp
    return core


def receptive_field(
    vocoder: Callable[[Any], Any], channels: int, hop: int, frames: int = 160
) -> int:
    """A convolutional vocoder's receptive radius in input frames, measured: one frame poked in
    the middle of a random input changes the output this far on either side (elsewhere it is
    bitwise equal), plus one frame of margin. ``hop``: output samples per input frame (the
    output read flat)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    features = torch.randn([1, channels, frames], generator=gen) * 2 - 5
    poked = features.clone()
    poked[..., frames // 2] = torch.randn([channels], generator=gen) * 2 - 5
    with torch.inference_mode():
        diff = torch.nonzero((vocoder(features) != vocoder(poked)).reshape(-1)).flatten()
    if diff.numel() == 0:
        return 0
    left = frames // 2 - int(diff.min()) // hop
    right = int(diff.max()) // hop - frames // 2
    return max(left, right) + 1


def padded_render(
    vocoder: Callable[[Any], Any], features: Any, start: int, end: int, pad: int, hop: int
) -> Any:
    """The output samples of frames ``[start, end)`` of ``features`` (``[1, channels, F]``, the
    frames known so far), rendered with up to ``pad`` frames on each side: equal to the whole
    render's samples (float rounding) once ``pad`` >= :func:`receptive_field`. Flat, as rendered."""
    import torch

    lo, hi = max(0, start - pad), min(features.shape[-1], end + pad)
    with torch.inference_mode():
        out = vocoder(features[..., lo:hi]).reshape(-1)
    return out[(start - lo) * hop : (end - lo) * hop]
