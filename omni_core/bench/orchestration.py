"""Orchestration benchmarks: hop latency, throughput, idle CPU, scaling — each with a baseline
measured in the same run and printed as a ratio (the figure of record).

Load: K fake AR stages in a chain (one replica each unless said), the last the only final stage;
stage 0 gets an 8-token prompt, stage i+1 the 16 tokens stage i produced (checked); every
final-stage token reaches the caller as its own streamed output (checked: 16 per request).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import threading
import time
from dataclasses import dataclass

from omni_core.bench import fake
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.plugin.hooks import PluginHost

TOKENS = 16
PROMPT = list(range(8))
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    bench: str
    case: str
    figure: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline


class CheckFailed(AssertionError):
    """A benchmark's own check failed (a measured result outside its bound); raised from the
    benchmark's run."""


def pipeline(stages: int, replicas: int = 1) -> PipelineConfig:
    rows = []
    for i in range(stages):
        rows.append(
            {
                "id": i,
                "name": f"s{i}",
                "kind": "bench-fake",
                "replicas": replicas,
                "engine_args": {"tokens": TOKENS, "expect_prompt_len": 8 if i == 0 else TOKENS},
                "inputs": [i - 1] if i else [],
                "final_output": i == stages - 1,
            }
        )
    return PipelineConfig.from_dict({"name": f"bench-k{stages}", "stages": rows}, source="<bench>")


def make_engine(
    stages: int, replicas: int = 1, uvloop: bool = False, gc_threshold: int | None = None
) -> AsyncOmniEngine:
    settings = OmniSettings(uvloop=uvloop, gc_threshold=gc_threshold)
    host = PluginHost.create(settings, load_entry_points=False, extra_plugins=[("bench", fake)])
    return AsyncOmniEngine(pipeline(stages, replicas), settings=settings, plugins=host)


def thread_cpu_s(native_id: int | None) -> float:
    """CPU time of one thread of this process: nanosecond ``schedstat`` where the kernel has it
    (``stat``'s clock ticks are 10 ms: too coarse for one request)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


# --- baselines ----------------------------------------------------------------------------------
def handoff_baseline(samples: int) -> list[int]:
    """Bare thread → event-loop hand-off latency (ns), one at a time."""

    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        out: list[int] = []
        got = threading.Event()

        def land(t0: int) -> None:
            out.append(time.perf_counter_ns() - t0)
            got.set()

        def sender() -> None:
            for _ in range(samples):
                got.clear()
                loop.call_soon_threadsafe(land, time.perf_counter_ns())
                got.wait()

        await asyncio.to_thread(sender)
        return out

    return asyncio.run(run())


def router_baseline(messages: int) -> float:
    """A minimal router on one loop (queue get + dict lookup + put): messages per second."""
    return router_costs(messages)[0]


def router_costs(messages: int) -> tuple[float, float]:
    """The minimal router's messages per second (wall clock) and CPU µs per message (this
    thread's CPU time: the measure of the orchestrator's CPU per output, unmoved by other
    processes taking the CPU away meanwhile, which the wall clock counts)."""
    inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    outs = [asyncio.Queue() for _ in range(64)]  # type: ignore[var-annotated]
    table = {i: outs[i % 64] for i in range(1024)}
    for i in range(messages):
        inbox.put_nowait((i & 1023, i))
    start, cpu = time.perf_counter(), time.thread_time()
    while not inbox.empty():
        key, value = inbox.get_nowait()
        table[key].put_nowait(value)
    cpu = time.thread_time() - cpu
    return messages / (time.perf_counter() - start), cpu / messages * 1e6


# --- load -----------------------------------------------------------------------------------------
async def drive(engine: AsyncOmniEngine, concurrency: int, seconds: float) -> tuple[int, float]:
    """C callers issuing requests back to back for ``seconds``; returns (requests, wall)."""
    stop = time.perf_counter() + seconds
    done = 0

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            outs = finished = 0
            async for out in engine.generate(PROMPT):
                outs += 1
                finished += out.finished
            if outs != TOKENS or finished != 1:
                raise CheckFailed(f"a request got {outs} outputs / {finished} terminals")
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done, time.perf_counter() - start


def measure(
    stages: int,
    concurrency: int,
    seconds: float,
    replicas: int = 1,
    uvloop: bool = False,
    gc_threshold: int | None = None,
) -> tuple[float, float, list[int]]:
    """(routed outputs/s, orchestrator CPU µs per output, hops ns) for one configuration; the
    routing part of each hop is left in ``fake.PROBE.routing``. ``gc_threshold`` is the engine
    setting (process-wide), undone afterwards."""
    thresholds = gc.get_threshold()
    engine = make_engine(stages, replicas, uvloop, gc_threshold)
    try:
        fake.PROBE.hops.clear()
        fake.PROBE.routing.clear()
        fake.PROBE.bad_prompts = 0
        tid = engine._runtime.thread.native_id  # type: ignore[union-attr]
        asyncio.run(drive(engine, min(concurrency, 8), min(seconds, 0.2)))  # warm-up
        fake.PROBE.hops.clear()
        fake.PROBE.routing.clear()
        fake.PROBE.handed.clear()  # the last stage's hand-offs are never consumed: keep it small
        cpu0 = thread_cpu_s(tid)
        requests, wall = asyncio.run(drive(engine, concurrency, seconds))
        cpu = thread_cpu_s(tid) - cpu0
        if fake.PROBE.bad_prompts:
            raise CheckFailed(f"{fake.PROBE.bad_prompts} stage prompts had the wrong length")
        if engine.num_active_requests:
            raise CheckFailed("requests left in the orchestrator")
        outputs = requests * stages * TOKENS
        return outputs / wall, cpu / outputs * 1e6, list(fake.PROBE.hops)
    finally:
        engine.shutdown()
        gc.set_threshold(*thresholds)


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e3  # µs


# --- benchmarks -----------------------------------------------------------------------------------
def bench_hop(quick: bool) -> list[Row]:
    """Hop latency vs the bare hand-off. The baseline is sampled right before and right after
    each hop run (the CPU's idle and frequency states drift over a run), and pooled."""
    samples = 300 if quick else 2000
    handoff: list[int] = []
    hop_rows: list[tuple[int, list[int], list[int]]] = []
    for c in (1,) if quick else (1, 64, 256):
        handoff += handoff_baseline(samples)
        _, _, hops = measure(3, c, 0.5 if quick else 3.0)
        handoff += handoff_baseline(samples)
        if not hops or len(fake.PROBE.routing) != len(hops):
            raise CheckFailed("no inter-stage hop was observed")
        hop_rows.append((c, hops, list(fake.PROBE.routing)))
    base = statistics.median(handoff) / 1e3
    rows = [Row("hop", "baseline", "thread→loop hand-off p50", base, "µs")]
    for c, hops, routing in hop_rows:
        case = f"K=3 C={c}"
        rows.append(Row("hop", case, "hop p50", pct(hops, 0.5), "µs", base, "hand-off p50"))
        rows.append(Row("hop", case, "hop p99", pct(hops, 0.99), "µs", base, "hand-off p50"))
        if c == 1:  # the orchestrator's own part: from the batch landing to the next stage
            rows.append(
                Row("hop", case, "routing p50", pct(routing, 0.5), "µs", base, "hand-off p50")
            )
    return rows


def bench_throughput(quick: bool) -> list[Row]:
    router, router_cpu = router_costs(100_000 if quick else 1_000_000)
    rows = [
        Row("throughput", "baseline", "minimal router", router, "msg/s"),
        Row("throughput", "baseline", "minimal router CPU/msg", router_cpu, "µs"),
    ]
    cases = [(3, 256)] if quick else [(k, c) for k in (1, 3) for c in (1, 64, 256)]
    for k, c in cases:
        rate, cpu_us, _ = measure(k, c, 0.5 if quick else 3.0)
        rows.append(
            Row(
                "throughput",
                f"K={k} C={c}",
                "routed outputs/s",
                rate,
                "out/s",
                router,
                "minimal router",
            )
        )
        rows.append(
            Row(
                "throughput",
                f"K={k} C={c}",
                "orchestrator CPU/output",
                cpu_us,
                "µs",
                router_cpu,
                "router CPU µs/msg",
            )
        )
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return rows
    base_rate, base_cpu, _ = measure(3, 256, 0.5 if quick else 3.0)
    rate, cpu_us, _ = measure(3, 256, 0.5 if quick else 3.0, uvloop=True)
    rows.append(
        Row(
            "throughput",
            "K=3 C=256 uvloop",
            "routed outputs/s",
            rate,
            "out/s",
            base_rate,
            "asyncio loop",
        )
    )
    rows.append(
        Row(
            "throughput",
            "K=3 C=256 uvloop",
            "orchestrator CPU/output",
            cpu_us,
            "µs",
            base_cpu,
            "asyncio loop",
        )
    )
    return rows


def bench_idle(quick: bool) -> list[Row]:
    seconds = 1.0 if quick else 10.0
    baseline_start = time.process_time()
    time.sleep(seconds / 4)
    bare = (time.process_time() - baseline_start) / (seconds / 4) * 100
    engine = make_engine(3)
    try:
        time.sleep(0.1)
        start = time.process_time()
        time.sleep(seconds)
        used = (time.process_time() - start) / seconds * 100
    finally:
        engine.shutdown()
    return [
        Row(
            "idle",
            "3 stages",
            "CPU while idle",
            used,
            "% core",
            max(bare, 1e-9),
            "process without engine",
        )
    ]


SERVING_GC_THRESHOLD = 50_000


def bench_scaling(quick: bool) -> list[Row]:
    """Cost per output as concurrency and replicas grow, each ÷ its smallest case. Once with
    Python's default collector settings (the figures of record) and once with the engine setting
    ``gc_threshold`` at its suggested serving value: the default's full collections rescan every
    in-flight request's state, which is what grows with C.

    Replicas 1 → 8 per stage (``--quick``: 1 and 8): 3r fake engine threads in this process,
    whose batches shrink as r grows; they reach the orchestrator through its loop's
    :class:`~omni_core.stage.inbox.LoopInbox`, many per loop turn."""
    rows = []
    seconds = 0.5 if quick else 2.0
    cs = (64, 1024) if quick else (64, 256, 1024, 4096)
    reps = (1, 8) if quick else (1, 2, 4, 8)
    for gc_threshold in (None, SERVING_GC_THRESHOLD):
        label = "" if gc_threshold is None else f" gc_threshold={gc_threshold}"
        first = None
        for c in cs:
            _, cpu_us, _ = measure(3, c, seconds, gc_threshold=gc_threshold)
            first = first or cpu_us
            rows.append(
                Row(
                    "scaling",
                    f"K=3 C={c}{label}",
                    "orchestrator CPU/output",
                    cpu_us,
                    "µs",
                    first,
                    f"C={cs[0]}",
                )
            )
        first = None
        for r in reps:
            _, cpu_us, _ = measure(3, 256, seconds, replicas=r, gc_threshold=gc_threshold)
            first = first or cpu_us
            rows.append(
                Row(
                    "scaling",
                    f"K=3 C=256 replicas={r}{label}",
                    "orchestrator CPU/output",
                    cpu_us,
                    "µs",
                    first,
                    "replicas=1",
                )
            )
    return rows


def bench_plugins(quick: bool) -> list[Row]:
    """The installed plugins vs none, in pipelines that do not use them (bench/plugins.py)."""
    from omni_core.bench.plugins import bench_plugins

    return bench_plugins(quick)


BENCHES = {
    "hop": bench_hop,
    "throughput": bench_throughput,
    "idle": bench_idle,
    "scaling": bench_scaling,
    "plugins": bench_plugins,
}
