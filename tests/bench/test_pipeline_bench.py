"""``omni bench pipeline``'s measuring parts: the closed loop, its correctness check, percentiles
and the CPU of idle processes (the engines themselves run in the benchmark, not here)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from omni_core.bench.orchestration import CheckFailed
from omni_core.bench.pipeline import closed_loop, cpu_s, percentile


def test_the_closed_loop_keeps_concurrency_clients_busy_until_total_requests_ran():
    in_flight, peak, seen = 0, 0, []

    async def run(i: int) -> tuple[float, int]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        seen.append(i)
        return 0.001 * (i + 1), 240

    rate, firsts = asyncio.run(closed_loop(run, 4, 10))
    assert sorted(seen) == list(range(10)) and peak == 4
    assert sorted(firsts) == [0.001 * (i + 1) for i in range(10)]
    assert rate > 0


def test_the_closed_loop_fails_when_a_request_lacks_audio():
    async def run(i: int) -> tuple[float, int]:
        return 0.01, 0 if i == 3 else 240  # request 3's audio is missing

    with pytest.raises(CheckFailed, match="audio lengths"):
        asyncio.run(closed_loop(run, 2, 5))


def test_percentiles_are_values_of_the_sample():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51.0  # the nearest rank
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0


def test_cpu_of_a_busy_process_counts_its_threads_time():
    before = cpu_s([os.getpid()])
    end = time.thread_time() + 0.05  # 50 ms of this thread's CPU, however loaded the machine
    while time.thread_time() < end:
        pass
    assert cpu_s([os.getpid()]) - before >= 0.04


@pytest.mark.engine
def test_a_chain_process_that_exits_fails_the_bench_instead_of_hanging(tmp_path):
    """A hand-wired chain whose engines cannot load (no model there): its processes exit, and the
    request waiting on them fails with a CheckFailed naming them (the bench exits 1, not hang)."""
    pytest.importorskip("vllm")
    from omni_core.bench.chain import HandChain

    missing = str(tmp_path / "no-model")
    chain = HandChain(missing, missing, missing, {})
    try:

        async def one() -> None:
            await asyncio.wait_for(chain.run("r0", [1, 2, 3]), timeout=120)

        with pytest.raises(CheckFailed, match=r"hand-wired chain: process .* exited"):
            asyncio.run(one())
        with pytest.raises(CheckFailed):  # and every later request, at once
            asyncio.run(one())
    finally:
        chain.close()


def test_stream_and_on_finish_generate_the_same_talker_tokens_and_audio():
    """Like for like: with stream edges the talker's 12 tokens are split over its segments (one
    per thinker chunk) and the vocoder voices the codes of one segment per chunk."""
    from omni_core.bench.pipeline import PARAMS, TALKER_TOKENS, THINKER_TOKENS, _tiny_omni, params

    stream, on_finish = _tiny_omni("stream"), _tiny_omni("on_finish")
    thinker_edge = stream.stages[1].inputs[0]
    segments = THINKER_TOKENS // thinker_edge.chunk
    assert thinker_edge.mode == "stream" and segments == 3
    assert params("stream")["talker"]["max_tokens"] * segments == TALKER_TOKENS
    assert params("on_finish") == PARAMS and PARAMS["talker"]["max_tokens"] == TALKER_TOKENS
    vocoder_edge = stream.stages[2].inputs[0]
    assert (vocoder_edge.mode, vocoder_edge.chunk) == ("stream", TALKER_TOKENS // segments)
    assert [e.mode for s in on_finish.stages for e in s.inputs] == ["on_finish", "on_finish"]


def fake_side(rate_by_round: list[float], first_s: float, name: str) -> Any:
    """A Side whose requests take no time (its per-round rates are given)."""
    from omni_core.bench import pipeline

    async def run(i: int) -> tuple[float, int]:
        return first_s, 240

    counts = {
        "talker prefilled tokens/request": 24.0,
        "talker (audio / hop) tokens out/request": 12.0,
        "talker engine steps/request": 3.5,
    }
    side = pipeline.Side(run, [os.getpid()], lambda: counts)
    side.rates = iter(rate_by_round)  # type: ignore[attr-defined]
    side.name = name  # type: ignore[attr-defined]
    return side


@pytest.fixture
def faked(monkeypatch):
    """The bench with its engines faked out: each side's closed loop returns the next of its
    per-round rates, and the order the sides ran in is recorded."""
    from omni_core.bench import pipeline

    order: list[str] = []
    rates = {
        pipeline.CHAIN: [10.0, 10.0, 10.0],
        "on_finish": [10.0, 20.0, 10.0],
        "audio only": [10.0, 10.0, 10.0],
        "stream": [5.0, 20.0, 11.0],  # per round vs on_finish: 0.5, 1.0, 1.1 -> median 1.0
    }
    firsts = {pipeline.CHAIN: 0.1, "on_finish": 0.1, "audio only": 0.1, "stream": 0.05}
    sides = {name: fake_side(r, firsts[name], name) for name, r in rates.items()}

    def measure(run: Any, levels: Any, quick: bool) -> Any:
        side = next(s for s in sides.values() if s.run is run)
        order.append(side.name)
        rate = next(side.rates)
        return {c: (rate, [firsts[side.name]] * 3) for c in levels}

    monkeypatch.setattr(pipeline, "_chain", lambda settings, stack: sides[pipeline.CHAIN])
    monkeypatch.setattr(pipeline, "_omni", lambda mode, settings, stack: sides[mode])
    monkeypatch.setattr(pipeline, "_measure", measure)
    monkeypatch.setattr(pipeline, "idle_share", lambda pids, seconds: (0.01, 0.001))
    monkeypatch.setattr(pipeline, "wire_rows", lambda quick: [])
    return order


def test_the_bench_prints_its_counts_per_request_per_mode(faked):
    """The rows the reader checks the like-for-like comparison by (engines faked out)."""
    from omni_core.bench import pipeline

    rows = {(r.case, r.figure): r.value for r in pipeline.bench_pipeline(quick=False)}
    for mode in ("on_finish", "audio only", "stream"):
        assert rows[(f"omni-core {mode}", "talker prefilled tokens/request")] == 24.0
        assert rows[(f"omni-core {mode}", "talker (audio / hop) tokens out/request")] == 12.0
        assert rows[(f"omni-core {mode}", "talker engine steps/request")] == 3.5


def test_the_bench_takes_medians_of_interleaved_rounds(faked):
    """3 rounds, every side once per round, the order rotated each round; each side's rate is
    the median over the rounds and stream vs on_finish the median of the per-round ratios."""
    from omni_core.bench import pipeline

    rows = {(r.case, r.figure): r for r in pipeline.bench_pipeline(quick=False)}
    sides = [pipeline.CHAIN, "on_finish", "audio only", "stream"]
    assert faked == sides + sides[1:] + sides[:1] + sides[2:] + sides[:2]
    for c in pipeline.LEVELS:
        assert rows[(f"C={c} omni-core stream", "requests/s")].value == 11.0  # median(5, 20, 11)
        assert rows[(f"C={c} omni-core on_finish", "requests/s")].value == 10.0
        ratio = rows[(f"C={c} stream vs on_finish", "requests/s ratio, median of rounds")]
        assert ratio.value == 1.0  # median(0.5, 1.0, 1.1); the ratio of the medians is 1.1
        first = rows[
            (f"C={c} stream vs {pipeline.CHAIN}", "p50 first audio ratio, median of rounds")
        ]
        assert first.value == pytest.approx(0.5)
