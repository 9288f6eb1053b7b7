"""Chaos run: many requests through a 3-stage, 2-replica scripted pipeline with random aborts,
request failures and replica deaths (replaced by the restart policy). Checks that every request
got exactly one terminal, nothing hung, and the orchestrator holds nothing at the end.

``omni bench chaos --requests 10000`` or ``python -m omni_core.bench.chaos``.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.errors import EngineDeadError, RequestError
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

PIPELINE = """
name: chaos
stages:
  - {id: 0, name: thinker, kind: scripted, replicas: 2,
     engine_args: {num_tokens: 8, delay_s: 0.001},
     restart: {policy: on-failure, max_restarts: 1000000, backoff_s: 0}, final_output: true}
  - {id: 1, name: talker, kind: scripted, replicas: 2, inputs: [0], engine_args: {num_tokens: 6},
     restart: {policy: on-failure, max_restarts: 1000000, backoff_s: 0}}
  - {id: 2, name: vocoder, kind: scripted, replicas: 2, inputs: [1], engine_args: {num_tokens: 4},
     restart: {policy: on-failure, max_restarts: 1000000, backoff_s: 0}, final_output: true,
     final_output_type: audio}
"""


MAX_REQUESTS = 10_000_000
MAX_CONCURRENCY = 65_536


def check_args(requests: int, concurrency: int) -> None:
    """Raise RequestError unless both are in range (0 requests in flight would wait forever)."""
    problems = [
        f"chaos: {name} must be in 1..{limit} (got {value})"
        for name, value, limit in (
            ("requests", requests, MAX_REQUESTS),
            ("concurrency", concurrency, MAX_CONCURRENCY),
        )
        if not 1 <= value <= limit
    ]
    if problems:
        raise RequestError("; ".join(problems))


@dataclass
class ChaosReport:
    requests: int = 0
    terminals: dict[int, int] = field(default_factory=dict)  # terminals per request -> count
    outcomes: dict[str, int] = field(default_factory=dict)
    hung: int = 0
    late_outputs: int = 0
    kills: int = 0
    active_at_end: int = -1
    tables_at_end: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            set(self.terminals) == {1}
            and self.hung == 0
            and self.late_outputs == 0
            and self.active_at_end == 0
            and not any(self.tables_at_end.values())
        )

    def lines(self) -> list[str]:
        return [
            f"requests            {self.requests}",
            f"terminals/request   {dict(sorted(self.terminals.items()))} (must be {{1: all}})",
            f"outcomes            {dict(sorted(self.outcomes.items()))}",
            f"replica kills       {self.kills}",
            f"hung calls          {self.hung}",
            f"outputs after term. {self.late_outputs}",
            f"active at end       {self.active_at_end}  tables {self.tables_at_end}",
            f"wall time           {self.wall_s:.2f}s",
            f"result              {'OK' if self.ok else 'VIOLATION'}",
        ]


async def run_chaos(
    requests: int = 10_000, concurrency: int = 256, seed: int = 0, bound_s: float = 30.0
) -> ChaosReport:
    check_args(requests, concurrency)
    rng = random.Random(seed)
    settings = OmniSettings(shutdown_timeout_s=10, testing_kit=True)  # its `scripted` kind
    engine = AsyncOmniEngine(
        PipelineConfig.from_yaml_text(PIPELINE, source="<chaos>"),
        settings=settings,
        plugins=PluginHost.create(settings, load_entry_points=False),
    )
    report = ChaosReport(requests=requests)
    gate = asyncio.Semaphore(concurrency)
    start = time.monotonic()

    async def one(i: int) -> None:
        rid = f"chaos-{i}"
        roll = rng.random()
        extra = {}
        if roll < 0.05:
            extra = {"scripted": {"fail_after": rng.randint(0, 5), "stages": ["talker"]}}
        params = {"thinker": SamplingParams(extra=extra), "talker": SamplingParams(extra=extra)}
        abort_after = rng.randint(0, 10) if 0.05 <= roll < 0.20 else None
        acknowledged = rng.random() < 0.5
        terminals = late = 0
        reason = "none"
        async with gate:
            try:
                async with asyncio.timeout(bound_s):
                    n = 0
                    async for out in engine.generate(
                        "x" * (i % 7 + 1), request_id=rid, sampling_params=params
                    ):
                        n += 1
                        if terminals:
                            late += 1
                        if out.finished:
                            terminals += 1
                            reason = out.finish_reason or "?"
                        elif n == abort_after:
                            if acknowledged:
                                await engine.abort_async(rid)
                            else:
                                engine.abort(rid)
            except TimeoutError:
                report.hung += 1
            except EngineDeadError:
                terminals += 1
                reason = "engine_dead"
        report.terminals[terminals] = report.terminals.get(terminals, 0) + 1
        report.outcomes[reason] = report.outcomes.get(reason, 0) + 1
        report.late_outputs += late

    async def killer(done: asyncio.Event) -> None:
        while not done.is_set():
            await asyncio.sleep(0.02)
            stage, replica = rng.randint(0, 2), rng.randint(0, 1)
            await engine.collective_rpc("die", kwargs={"replica": replica}, stage_ids=[stage])
            report.kills += 1

    done = asyncio.Event()
    kill_task = asyncio.ensure_future(killer(done))
    try:
        await asyncio.gather(*(one(i) for i in range(requests)))
    finally:
        done.set()
        await kill_task
        report.wall_s = time.monotonic() - start
        report.active_at_end = engine.num_active_requests
        report.tables_at_end = engine.request_tables()
        await asyncio.to_thread(engine.shutdown)
    return report


def main(requests: int = 10_000, concurrency: int = 256, seed: int = 0) -> int:
    report = asyncio.run(run_chaos(requests, concurrency, seed))
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
