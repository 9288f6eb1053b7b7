"""Speech-out metrics of ``omni serve`` (issue 27): time to first audio, real-time factor and
underruns, from the audio pieces of final stages, on a fake clock."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client import generate_latest

from omni_core.media import AudioChunk
from omni_core.outputs import StageOutput
from omni_core.serve import metrics as metrics_module
from omni_core.serve.metrics import OmniMetrics

RATE = 1000  # samples per second: 500 samples are half a second


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def port() -> SimpleNamespace:
    def stage(name: str, final: bool) -> SimpleNamespace:
        return SimpleNamespace(name=name, config=SimpleNamespace(inputs=[], final_output=final))

    stages = {0: stage("talker", False), 1: stage("speaker", True)}
    return SimpleNamespace(pipeline=SimpleNamespace(stages=stages))


def audio(rid: str, samples: int, finished: bool = False) -> StageOutput:
    chunk = AudioChunk(np.zeros(samples, dtype=np.float32), RATE)
    return StageOutput(request_id=rid, token_ids=[1], finished=finished, payload=chunk)


def sample(metrics: OmniMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


def test_first_audio_rtf_and_underruns(clock):
    m = OmniMetrics()
    m.omni_request_admitted("r", port())
    m.omni_stage_submitted("r", 0)
    m.omni_stage_submitted("r", 1)
    clock[0] += 0.2
    m.omni_stage_output("r", 0, audio("r", 500))  # not a final stage: not the user's audio
    clock[0] += 0.1
    m.omni_stage_output("r", 1, audio("r", 0))  # no samples: not yet audio
    clock[0] += 0.1
    m.omni_stage_output("r", 1, audio("r", 500))  # first audio at 0.4 s, plays until 0.9 s
    clock[0] += 0.4
    m.omni_stage_output("r", 1, audio("r", 500))  # at 0.8 s: in time, plays until 1.4 s
    clock[0] += 0.8
    m.omni_stage_output("r", 1, audio("r", 500, finished=True))  # at 1.6 s: an underrun
    m.omni_request_terminal("r", "stop")
    assert sample(m, "omni_time_to_first_audio_seconds_count") == 1
    assert sample(m, "omni_time_to_first_audio_seconds_sum") == pytest.approx(0.4)
    assert sample(m, "omni_audio_underruns_total") == 1
    assert sample(m, "omni_audio_rtf_count") == 1
    assert sample(m, "omni_audio_rtf_sum") == pytest.approx(1.6 / 1.5)  # last piece / duration
    assert not m._audio  # the request's bookkeeping ends with it
    text = generate_latest(m.registry).decode()
    for name in (
        "omni_time_to_first_audio_seconds",
        "omni_audio_rtf",
        "omni_audio_underruns_total",
    ):
        assert f"# TYPE {name} " in text


def test_a_request_without_audio_observes_nothing(clock):
    m = OmniMetrics()
    m.omni_request_admitted("t", port())
    m.omni_stage_submitted("t", 1)
    m.omni_stage_output("t", 1, StageOutput(request_id="t", token_ids=[1], finished=True))
    m.omni_request_terminal("t", "stop")
    assert sample(m, "omni_time_to_first_audio_seconds_count") == 0
    assert sample(m, "omni_audio_rtf_count") == 0
    assert sample(m, "omni_audio_underruns_total") == 0
