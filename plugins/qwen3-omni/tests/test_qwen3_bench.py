"""``omni bench qwen3-omni`` is registered by omni-qwen3 and measures with omni-qwen's speech bench
(:mod:`omni_qwen.speech_bench`): here on a fake engine (what reaches each stage, the checks, the
rows); the run itself is CI's ``omni bench qwen3-omni --quick`` (.ci/run), which fails on a
failed check."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from omni_qwen.api import Speech
from omni_qwen3.bench import _Qwen3Engine, check, measure, rows

from omni_core import OmniSettings, PluginHost
from omni_core.plugin import CheckFailed

pytestmark = pytest.mark.timeout(60)


class FakeEngine:
    """Yields ``chunks`` audio outputs of 1920 samples per request; records the params."""

    def __init__(self, chunks: int = 3) -> None:
        self.chunks = chunks
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    async def generate(self, prompt: Any, sampling_params: dict[str, Any]) -> Any:
        self.calls.append((prompt, sampling_params))
        yield SimpleNamespace(error=None, output_type="text", payload=None)
        for _ in range(self.chunks):
            audio = SimpleNamespace(samples=np.zeros(1920, dtype=np.float32))
            yield SimpleNamespace(error=None, output_type="audio", payload=audio)


def test_registered_by_the_plugin(tmp_path):
    host = PluginHost.create(OmniSettings(cache_dir=tmp_path))
    assert "qwen3-omni" in host.benchmarks()


def test_requests_reach_qwen3_omnis_stages_streamed_and_whole_interleaved():
    fake = FakeEngine()
    got = measure(_Qwen3Engine(fake), 24, (1, 4), 2)  # at least 2 requests per level and mode
    assert {k: len(v) for k, v in got.items()} == {
        (1, False): 2,
        (1, True): 2,
        (4, False): 4,
        (4, True): 4,
    }
    assert all(s.seconds == pytest.approx(3 * 1920 / 24000) for v in got.values() for s in v)
    streamed = []
    for prompt, params in fake.calls:
        assert set(params) == {"thinker", "talker", "code2wav"}  # not qwen2.5-omni's token2wav
        assert params["talker"]["max_tokens"] == 24 and params["talker"]["temperature"] == 0.0
        assert "<|im_start|>assistant" in prompt
        streamed.append(params["code2wav"]["extra"]["audio_stream"])
    assert streamed == [False, True, False, True] + [False] * 4 + [True] * 4


def test_a_request_without_audio_fails_the_run():
    with pytest.raises(CheckFailed, match=r"qwen3-omni: whole request at C=1: no audio"):
        measure(_Qwen3Engine(FakeEngine(chunks=0)), 8, (1,), 1)


def test_streamed_and_whole_must_voice_the_same_duration():
    same = {(1, False): [Speech(0.5, 0.2, 0, 2.0)], (1, True): [Speech(0.1, 0.3, 0, 2.0)]}
    check(same)
    differ = {**same, (1, True): [Speech(0.1, 0.3, 0, 1.92)]}
    with pytest.raises(CheckFailed, match=r"different durations of audio: 1\.9200, 2\.0000 s"):
        check(differ)


def test_rows_give_streamed_ttfp_against_whole_of_the_same_level():
    got = {
        (1, False): [Speech(0.5, 0.2, 0, 2.0)],
        (1, True): [Speech(0.1, 0.3, 1, 2.0)],
        (4, False): [Speech(t, 0.2, 0, 2.0) for t in (0.8, 1.0, 1.2, 2.0)],
        (4, True): [Speech(t, 0.4, u, 2.0) for t, u in ((0.2, 0), (0.3, 1), (0.4, 2), (0.6, 3))],
    }
    table = {(r.case, r.figure): r for r in rows(got, 24)}
    streamed1 = table[("tiny, 24 frames, C=1, streamed code2wav", "TTFP p50")]
    assert streamed1.value == pytest.approx(100) and streamed1.ratio == pytest.approx(0.2)
    assert table[("tiny, 24 frames, C=1, whole code2wav", "TTFP p50")].baseline is None
    p99 = table[("tiny, 24 frames, C=4, streamed code2wav", "TTFP p99")]
    assert p99.value == pytest.approx(600) and p99.baseline == pytest.approx(2000)
    assert table[("tiny, 24 frames, C=4, streamed code2wav", "underruns p99")].value == 3
    assert table[("tiny, 24 frames, C=4, streamed code2wav", "RTF p50")].value == 0.4
    assert len(table) == 4 * 7
