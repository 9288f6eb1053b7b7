"""The code2wav stage engine (``omni_qwen3.vocoder``) in this process: whole decode equals
transformers' ``code2wav`` on the same frames bitwise, a streamed request (codes arriving in
pieces) joins into the whole decode within 1e-6, bad input is one RequestError naming it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from omni_core import RequestError
from omni_core.extend import AUDIO_OPTIONS
from omni_core.sampling import SamplingParams

pytestmark = [pytest.mark.engine, pytest.mark.timeout(120)]

FRAMES, GROUPS = 30, 4


@pytest.fixture(scope="module")
def vocoder(tiny_qwen3):
    from omni_qwen3.vocoder import build

    return build({"model": str(tiny_qwen3), "options": {"chunk_frames": 8}})


@pytest.fixture(scope="module")
def codes() -> list[int]:
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, 64, (FRAMES * GROUPS,), generator=g).tolist()


def run(engine: Any, parts: list[list[int]], extra: dict[str, Any]) -> list[Any]:
    rid = f"r{id(parts)}"
    engine.add(
        SimpleNamespace(
            request_id=rid,
            prompt=parts[0],
            params=SamplingParams(extra=extra),
            streaming_input=len(parts) > 1,
        )
    )
    outs, sent = [], 1
    while True:
        if sent < len(parts) and not engine.has_work():
            engine.add_input(rid, parts[sent], sent == len(parts) - 1)
            sent += 1
            continue
        for out in engine.step():
            outs.append(out)
            if out.finished:
                return outs


def samples(outs: list[Any]) -> np.ndarray:
    from omni_core.extend import default_plane

    plane = default_plane()
    return np.concatenate([np.asarray(plane.take(o.payload.samples)) for o in outs])


def test_whole_and_streamed_decodes(vocoder, hf3, codes):
    whole = run(vocoder, [codes], {})
    assert len(whole) == 1 and whole[0].error is None and whole[0].token_ids == codes
    assert whole[0].payload.sample_rate == 24000
    wave = samples(whole)
    frames = torch.tensor(codes).reshape(1, FRAMES, GROUPS).transpose(1, 2)
    with torch.no_grad():
        ref = hf3[1].code2wav(frames).reshape(-1).numpy()
    assert wave.shape == ref.shape == (FRAMES * 1920 - 555,) and np.array_equal(wave, ref)
    parts = [codes[i : i + 6 * GROUPS] for i in range(0, len(codes), 6 * GROUPS)]
    streamed = run(vocoder, parts, {AUDIO_OPTIONS: {"stream": True}})
    assert len(streamed) >= 3 and [c for o in streamed for c in o.token_ids] == codes
    joined = samples(streamed)
    assert joined.shape == wave.shape and np.abs(joined - wave).max() <= 1e-6


def test_bad_input_is_one_request_error_naming_it(vocoder, codes):
    with pytest.raises(RequestError, match=r"codec id 64 at position 1 is outside \[0, 64\)"):
        run(vocoder, [[0, 64]], {})
    with pytest.raises(RequestError, match=r"code2wav: sampling_params.extra.audio_stream must"):
        run(vocoder, [codes], {"audio_stream": "yes"})
    (out,) = run(vocoder, [codes[:-1]], {})
    assert out.error is not None and out.error.status_code == 400
    assert "119 codes are not whole frames of 4" in out.error.message
