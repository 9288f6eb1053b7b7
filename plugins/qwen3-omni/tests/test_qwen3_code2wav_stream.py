"""Streaming code2wav (``omni_qwen3.code2wav.stream_decode``) against the whole decode, on the
tiny checkpoint's code2wav (transformers' module, random codes).

At a left context covering the receptive field (tiny: 2 layers x (window 8 - 1) = 14 frames for
the attention, about 6 more for the convolutions) the streamed waveform equals the whole decode
within 1e-6 and has its exact length; a shorter context is measurably off (the error table in
docs/models.md). transformers' own ``chunked_decode`` loses 555 samples per chunk boundary.
"""

from __future__ import annotations

import pytest
import torch
from omni_qwen3.code2wav import lookahead, receptive_field, stream_decode

pytestmark = pytest.mark.engine

FRAMES = 40


@pytest.fixture(scope="module")
def code2wav(hf3):
    return hf3[1].code2wav


@pytest.fixture(scope="module")
def codes():
    return torch.randint(0, 64, (1, 4, FRAMES), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def whole(code2wav, codes):
    with torch.no_grad():
        return code2wav(codes)


def test_whole_decode_length_is_frames_times_1920_minus_the_look_ahead(code2wav, whole):
    assert lookahead(code2wav) == 555 and receptive_field(code2wav) == 14
    assert whole.shape == (1, 1, FRAMES * 1920 - 555)
    assert 0.01 < float(whole.abs().max()) < 1.0  # below the final clamp


@pytest.mark.parametrize("chunk", [4, 12])
def test_streamed_equals_whole_within_1e6_at_full_receptive_field_context(
    code2wav, codes, whole, chunk
):
    pieces = list(stream_decode(code2wav, codes, chunk, left_context=25))
    assert len(pieces) == -(-FRAMES // chunk)
    assert pieces[0].shape[-1] == chunk * 1920 - 555  # first audio after the first chunk
    wav = torch.cat(pieces, -1)
    assert wav.shape == whole.shape  # gap-free: nothing lost at the boundaries
    assert float((wav - whole).abs().max()) <= 1e-6


def test_a_context_shorter_than_the_receptive_field_is_off(code2wav, codes, whole):
    wav = torch.cat(list(stream_decode(code2wav, codes, 12, left_context=8)), -1)
    assert wav.shape == whole.shape
    assert float((wav - whole).abs().max()) > 1e-3


def test_transformers_chunked_decode_drops_the_look_ahead_at_every_boundary(code2wav, codes):
    with torch.no_grad():
        wav = code2wav.chunked_decode(codes, chunk_size=12, left_context_size=25)
    boundaries = -(-FRAMES // 12) - 1
    assert wav.shape[-1] == FRAMES * 1920 - 555 - boundaries * 555


def test_bad_chunking_is_refused(code2wav, codes):
    with pytest.raises(ValueError, match="chunk and left_context must be >= 1"):
        next(stream_decode(code2wav, codes, 4, left_context=0))
