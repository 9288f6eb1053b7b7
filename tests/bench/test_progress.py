"""Benchmarks say what they are doing (omni_core.bench.progress) and ``omni bench`` shows it on
stderr; ``--quick`` tables say their figures are not comparable (issue 41). ``omni bench vllm``
warms both sides with the timed workload's shape before their timed windows (no engine here: a
fake AsyncLLM records what it was asked)."""

from __future__ import annotations

import asyncio
import io
import sys
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from omni_core.bench import progress
from omni_core.cli import main


def test_phases_reach_the_innermost_reporter_only_while_it_is_installed():
    outer: list[str] = []
    inner: list[str] = []
    progress.phase("nobody listens")
    with progress.reporting(outer.append):
        progress.phase("a")
        with progress.reporting(inner.append):
            progress.phase("b")
        progress.phase("c")
    progress.phase("d")
    assert (outer, inner) == (["a", "c"], ["b"])


def test_shown_writes_a_line_per_phase_when_not_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with progress.shown("demo", console):
        progress.phase("starting the engine")
        progress.phase("run 1/1")
    lines = out.getvalue().splitlines()
    assert [line.split(" (at ")[0] for line in lines] == [
        "bench demo: started",
        "bench demo: starting the engine",
        "bench demo: run 1/1",
        "bench demo: done",
    ]
    assert all(line.endswith(" s)") for line in lines)


def test_shown_says_when_a_benchmark_failed():
    for terminal in (False, True):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=200)
        try:
            with progress.shown("demo", console):
                raise RuntimeError("crashed")
        except RuntimeError:
            pass
        assert "bench demo: failed" in out.getvalue(), terminal


def test_omni_bench_quick_shows_progress_and_labels_its_figures(capsys):
    assert main(["bench", "hop", "--quick"]) == 0
    captured = capsys.readouterr()
    assert "bench hop: started" in captured.err and "bench hop: done" in captured.err
    assert "not comparable" in " ".join(captured.out.split())


class FakeLLM:
    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def generate(self, prompt: str, params: dict[str, Any], request_id: str) -> Any:
        self.asked.append((request_id, params))
        for _ in range(params["max_tokens"]):
            await asyncio.sleep(0)
            yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7])])

    def shutdown(self) -> None:
        pass


def test_the_bare_baseline_is_warmed_like_omni_core_before_its_window(monkeypatch):
    import omni_core.kinds
    from omni_core.bench import vllm as bench

    llm = FakeLLM()
    fake = SimpleNamespace(
        build_async_llm=lambda model, **kwargs: llm,
        VllmSamplingParams=lambda **kwargs: kwargs,
        RequestOutputKind=SimpleNamespace(DELTA="delta"),
    )
    monkeypatch.setitem(sys.modules, "omni_core.kinds.vllm_adapter", fake)
    monkeypatch.setattr(omni_core.kinds, "vllm_adapter", fake, raising=False)
    phases: list[str] = []
    with progress.reporting(phases.append):
        rate = asyncio.run(bench._bare_workload("m", 3, 5, runs=2))
    assert rate > 0
    warm, timed = llm.asked[:3], llm.asked[3:]
    assert [rid for rid, _ in warm] == ["bwarm-0", "bwarm-1", "bwarm-2"]
    assert len(timed) == 6
    for (_, w), (_, t) in zip(warm, timed, strict=False):
        assert w["max_tokens"] == bench.WARM_TOKENS and t["max_tokens"] == 5
        assert {**w, "max_tokens": 5} == t  # the timed params otherwise: seeded, ignore_eos
    assert phases == [
        "bare AsyncLLM: starting the engine",
        f"bare AsyncLLM: warm-up, 3x{bench.WARM_TOKENS} tokens",
        "bare AsyncLLM: 3x5 tokens, run 1/2",
        "bare AsyncLLM: 3x5 tokens, run 2/2",
    ]
