"""The 12 Hz decoder streamed: ``n`` frames give ``n x 1920`` samples, no look-ahead, and a stream
with :func:`exact_left_context` frames of context equals the whole decode within 1e-6 for any
chunk size, while one frame less is outside that bound (the bound is the receptive field, not
vacuous). The real geometry's exact context is computed from its config (8 x 71 + 6)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from omni_core.family import causal_stream
from omni_core.testing.parity import check_bounded

FRAME = 1920


@pytest.fixture(scope="module")
def decoder(tiny_tts):
    from omni_qwen3_tts.decoder import DecoderEngine

    return DecoderEngine({"model": str(tiny_tts), "threads": 1, "options": {}})


@pytest.fixture(scope="module")
def codes():
    import torch

    return torch.randint(0, 64, (1, 16, 60), generator=torch.Generator().manual_seed(0))


def test_frames_give_whole_frames_of_samples_with_no_lookahead(decoder, codes):
    whole = decoder.decode(codes)
    assert whole.shape == (60 * FRAME,)
    changed = codes.clone()
    changed[0, :, 40] = (changed[0, :, 40] + 1) % 64
    moved = decoder.decode(changed)
    assert (moved[: 40 * FRAME] == whole[: 40 * FRAME]).all()  # nothing before frame 40 moves
    assert not (moved[40 * FRAME :] == whole[40 * FRAME :]).all()


@pytest.mark.parametrize("chunk", [1, 4, 13])
def test_a_stream_with_the_exact_context_equals_the_whole_decode(decoder, codes, chunk):
    import torch
    from omni_qwen3_tts.decoder import exact_left_context

    context = exact_left_context(decoder.decoder.config)
    assert context == decoder.left_context == 20  # tiny: 2 layers x (8 - 1) + 6

    def stream(left: int):
        return torch.cat(list(causal_stream(decoder.decode, codes, chunk, left, FRAME, 0)))

    check_bounded(
        stream(context).numpy(),
        decoder.decode(codes).numpy(),
        1e-6,
        off=stream(context - 1).numpy(),
        what=f"streamed wav (chunk {chunk})",
    )


def test_the_real_geometry_needs_574_frames():
    from omni_qwen3_tts.decoder import exact_left_context

    real = SimpleNamespace(num_hidden_layers=8, sliding_window=72)
    assert exact_left_context(real) == 8 * 71 + 6
