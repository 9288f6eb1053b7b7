"""``omni bench plugins``: what the installed plugins (the ``omni_core.plugins`` entry points)
cost pipelines that do not use them. Plugins take part only in the pipelines that use them
(``omni_core.plugin.scope``), so the goal is the same streamed stages and a throughput ratio of
at least 0.98.

Two loads on the fake engine (``bench-fake``), each run by three engines in one process, measured
in alternating rounds: no plugin loaded from entry points (the baseline), every installed plugin
loaded, and every installed plugin taking part in every pipeline (what plugin API 1 did; shown
for reference). Loads:

* **tiny-omni shape**: thinker (final, text) → talker → vocoder (final, audio) with ``on_finish``
  edges; the talker answers in vLLM's final-only mode when nobody reads its deltas;
* **bench load K=3**: the chain of ``omni bench throughput`` (only the last stage final).

Figures: requests/s (64 callers back to back; the ratio to the setup without plugins is the
figure of record), requests per second of process CPU time (steadier when other processes share the
machine: it leaves out time spent waiting for a core), and the stages the orchestrator asked to
stream their deltas. Rounds alternate between the setups, each round in a rotated order, with
the garbage collector off during a round (collected before it). Each figure is the setup's best
round: other processes on the machine only ever slow a round down (medians of rounds moved by
±30 % between runs on a shared 2-core machine, best rounds by a few %).
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from omni_core.bench import fake
from omni_core.bench.orchestration import PROMPT, TOKENS, CheckFailed, Row, pipeline
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.plugin.hooks import PluginHost

SETUPS = {
    "none": "no entry-point plugins",
    "installed": "installed plugins",
    "everywhere": "every plugin in every pipeline",
}
CONCURRENCY = 64


class _EveryPipeline(PluginHost):
    """A host whose plugins all take part in every pipeline (no per-pipeline subset)."""

    def for_pipeline(self, pipeline: Any) -> PluginHost:
        return self


def tiny_omni_shape() -> PipelineConfig:
    def stage(i: int, **extra: Any) -> dict[str, Any]:
        args = {"tokens": TOKENS, "expect_prompt_len": 8 if i == 0 else TOKENS, "final_only": True}
        return {"id": i, "name": ("thinker", "talker", "vocoder")[i], "kind": "bench-fake",
                "engine_args": args, "inputs": [i - 1] if i else [], **extra}  # fmt: skip

    rows = [
        stage(0, final_output=True, final_output_type="text"),
        stage(1),
        stage(2, final_output=True, final_output_type="audio"),
    ]
    return PipelineConfig.from_dict({"name": "tiny-omni-shape", "stages": rows}, source="<bench>")


def hosts() -> dict[str, PluginHost]:
    """The three plugin setups (keys of :data:`SETUPS`), each with the ``bench-fake`` kind."""
    extra = [("bench", fake)]
    settings = OmniSettings(disable_plugins=[])
    return {
        "none": PluginHost.create(settings, load_entry_points=False, extra_plugins=extra),
        "installed": PluginHost.create(settings, extra_plugins=extra),
        "everywhere": _EveryPipeline.create(settings, extra_plugins=extra),
    }


def installed_plugins(host: PluginHost) -> list[str]:
    """Names of the plugins loaded from entry points."""
    return sorted(
        name
        for name, info in host.pm.plugin_info.items()
        if not info.builtin and info.distribution != "<local>"
    )


async def _drive(engine: AsyncOmniEngine, seconds: float, outputs: int) -> tuple[float, float]:
    """Callers back to back for ``seconds``: (requests per second, requests per CPU second of
    this process). Each request must give ``outputs`` outputs, the last one finished."""
    stop = time.perf_counter() + seconds
    done = 0

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            got = [out async for out in engine.generate(PROMPT)]
            if len(got) != outputs or not got[-1].finished:
                raise CheckFailed(f"a request got {len(got)} outputs, expected {outputs}")
            done += 1

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def _streamed(engine: AsyncOmniEngine, outputs: int) -> frozenset[int]:
    """Stages the orchestrator asked to stream their deltas for one request."""
    fake.PROBE.stream_outputs.clear()
    asyncio.run(_drive_one(engine, outputs))
    return frozenset(s for s, asked in fake.PROBE.stream_outputs.items() if True in asked)


async def _drive_one(engine: AsyncOmniEngine, outputs: int) -> None:
    got = [out async for out in engine.generate(PROMPT)]
    if len(got) != outputs:
        raise CheckFailed(f"a request got {len(got)} outputs, expected {outputs}")


def measure_case(
    config: PipelineConfig, outputs: int, setups: dict[str, PluginHost], rounds: int, seconds: float
) -> tuple[dict[str, tuple[float, float]], dict[str, frozenset[int]]]:
    """Per setup: the best round's (requests/s, requests per CPU s) and the streamed stages;
    rounds alternate between the setups, in a rotated order each round."""
    engines = {
        name: AsyncOmniEngine(config, settings=host.settings, plugins=host)
        for name, host in setups.items()
    }
    try:
        streamed = {name: _streamed(engine, outputs) for name, engine in engines.items()}
        fake.PROBE.bad_prompts = 0
        for engine in engines.values():  # warm-up
            asyncio.run(_drive(engine, min(seconds, 0.1), outputs))
        rates: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
        order = list(engines)
        for i in range(rounds):
            for name in order[i % len(order) :] + order[: i % len(order)]:
                gc.collect()  # no collection of an earlier round's garbage lands in this one
                gc.disable()
                try:
                    rates[name].append(asyncio.run(_drive(engines[name], seconds, outputs)))
                finally:
                    gc.enable()
        if fake.PROBE.bad_prompts:
            raise CheckFailed(f"{fake.PROBE.bad_prompts} stage prompts had the wrong length")
        for name, engine in engines.items():
            if engine.num_active_requests:
                raise CheckFailed(f"{name}: requests left in the orchestrator")
        best = {n: (max(w for w, _ in r), max(c for _, c in r)) for n, r in rates.items()}
        return best, streamed
    finally:
        for engine in engines.values():
            engine.shutdown()


def _stages(stages: frozenset[int]) -> str:
    return "{" + ", ".join(map(str, sorted(stages))) + "}"


def bench_plugins(quick: bool) -> list[Row]:
    setups = hosts()
    names = ", ".join(installed_plugins(setups["installed"])) or "none"
    rounds, seconds = (4, 0.08) if quick else (12, 0.3)
    cases = [("tiny-omni shape", tiny_omni_shape(), 2 * TOKENS)]
    if not quick:
        cases.append(("bench load K=3", pipeline(3), TOKENS))
    rows = []
    for case, config, outputs in cases:
        rate, streamed = measure_case(config, outputs, setups, rounds, seconds)
        if streamed["installed"] != streamed["none"]:
            raise CheckFailed(
                f"{case}: the installed plugins ({names}) change the streamed stages: "
                f"{_stages(streamed['installed'])} vs {_stages(streamed['none'])} without them"
            )
        label = SETUPS["none"]
        for i, (figure, unit) in enumerate((("requests/s", "req/s"), ("requests/CPU s", "req"))):
            base = rate["none"][i]
            rows.append(Row("plugins", case, f"{figure}, {label}", base, unit))
            for setup in ("installed", "everywhere"):
                value, what = rate[setup][i], SETUPS[setup]
                if setup == "installed":
                    what += f" ({names})"
                rows.append(Row("plugins", case, f"{figure}, {what}", value, unit, base, label))
        sets = ", ".join(f"{name} {_stages(stages)}" for name, stages in streamed.items())
        rows.append(
            Row(
                "plugins",
                case,
                f"streamed stages: {sets}",
                len(streamed["installed"]),
                "stages",
                len(streamed["none"]),
                SETUPS["none"],
            )
        )
    return rows
