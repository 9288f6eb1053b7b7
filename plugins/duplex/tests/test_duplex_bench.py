"""``omni bench duplex``: registered through the core's benchmark hook; its measurements and
checks on scripted stages (the real run is ``omni bench duplex --quick`` in CI)."""

from __future__ import annotations

import pytest
from duplex_helpers import register
from omni_core import PluginHost
from omni_core.bench.orchestration import CheckFailed

from omni_duplex import bench

SLOW = "{num_tokens: 300, delay_s: 0.005}"  # a reply still playing when the user barges in


def test_the_benchmark_is_registered_and_loads_lazily(fake_entry_points, omni_settings):
    register(fake_entry_points)
    benchmarks = PluginHost.create(omni_settings).benchmarks()
    assert list(benchmarks) == ["duplex"]
    assert benchmarks["duplex"].run.__module__ == "omni_duplex.plugin"


async def test_commit_to_first_audio_measures_every_turn(duplex):
    engine = duplex()
    times = await bench.commit_to_first_audio(engine, 3)
    assert len(times) == 3 and all(0 < t < 5 for t in times)
    assert engine.session_count() == 0  # closed after the run


async def test_barge_in_measures_from_speech_start_to_the_cancelled_terminal(duplex):
    engine = duplex(thinker=SLOW)
    latency, aborted = await bench.barge_in(engine, 2)
    assert len(latency) == 2 and len(aborted) == 2
    # speech is delivered in real time: the VAD needs its minimum speech duration first
    assert all(bench.MIN_SPEECH_MS / 1000 <= t < 2 for t in latency)
    assert all(0 <= t < 2 for t in aborted)


async def test_barge_in_fails_its_check_when_the_reply_ends_first(duplex):
    engine = duplex(thinker="{num_tokens: 2}")  # over before any speech counts
    with pytest.raises(CheckFailed, match="reply ended before the barge-in"):
        await bench.barge_in(engine, 1)


def test_percentiles():
    values = [float(v) for v in range(1, 101)]
    assert bench.pct(values, 0.5) == 51 and bench.pct(values, 0.99) == 100


async def test_barge_in_with_either_vad(duplex):
    engine = duplex(thinker=SLOW)
    silero, _ = await bench.barge_in(engine, 1)  # the pipeline's default VAD
    energy, _ = await bench.barge_in(engine, 1, vad="energy")
    # both need the minimum speech duration; Silero decides on 32 ms windows
    assert bench.MIN_SPEECH_MS / 1000 <= energy[0] < 2
    assert bench.MIN_SPEECH_MS / 1000 <= silero[0] < 2


@pytest.mark.slow
def test_vad_rows_put_silero_beside_energy_and_check_its_figures(monkeypatch):
    rows = {r.figure: r for r in bench.vad_rows()}
    false_silero = rows["VAD false barge-ins (silero)"].value
    assert false_silero <= 5 < rows["VAD false barge-ins (energy)"].value
    assert rows["VAD speech detected (silero)"].value >= 95
    cost = rows["VAD cost per 20 ms chunk p50 (silero)"]
    assert cost.unit == "µs" and cost.baseline_name == "energy" and cost.value > 0
    monkeypatch.setattr(bench, "MIN_SPEECH_DETECTED", 1.01)  # more than every clip
    with pytest.raises(CheckFailed, match="Silero VAD below its figures"):
        bench.vad_rows()
