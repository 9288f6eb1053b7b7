"""``omni bench vllm``: a one-stage omni-core pipeline vs bare vLLM ``AsyncLLM`` on the same
tiny-model workload (run one after the other in this process), and tiny-omni's time to first
audio with ``stream`` vs ``on_finish`` edges, with the orchestrator's share of it.

Both sides of the throughput comparison are warmed up the same way before their timed runs: the
timed workload's shape (``n`` concurrent requests, the same sampling params) with a few tokens
each. (The bare side used to warm up with one default-params request, so its first seeded
batch paid vLLM's one-time costs inside its timed window: ``--quick`` reported omni-core 15.8x
bare vLLM.) ``--quick``: smaller workloads, one run, tiny-omni with ``stream`` edges only: a
smoke test whose figures are not comparable with a full run's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from omni_core.bench.orchestration import CheckFailed, Row, thread_cpu_s
from omni_core.bench.progress import phase
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

ENGINE_ARGS = {
    "max_model_len": 512,
    "max_num_seqs": 64,
    "kv_cache_memory_bytes": 64 << 20,
    "dtype": "float32",
    "seed": 0,
}


def _engine(config: PipelineConfig, settings: OmniSettings) -> AsyncOmniEngine:
    return AsyncOmniEngine(
        config, settings=settings, plugins=PluginHost.create(settings, load_entry_points=False)
    )


WARM_TOKENS = 4  # tokens per request of the warm-up (the timed workload's shape otherwise)


async def _omni_workload(engine: AsyncOmniEngine, n: int, tokens: int, runs: int = 1) -> float:
    """Tokens/s of ``n`` concurrent requests of ``tokens`` tokens: the median of ``runs``, after
    a warm-up of the same shape."""
    phase(f"omni-core: warm-up, {n}x{WARM_TOKENS} tokens")
    await _omni_run(engine, n, WARM_TOKENS)
    rates = []
    for run in range(runs):
        phase(f"omni-core: {n}x{tokens} tokens, run {run + 1}/{runs}")
        rates.append(await _omni_run(engine, n, tokens))
    return statistics.median(rates)


async def _omni_run(engine: AsyncOmniEngine, n: int, tokens: int) -> float:
    params = SamplingParams(
        max_tokens=tokens, temperature=0.8, seed=1, extra={"vllm": {"ignore_eos": True}}
    )

    async def one(i: int) -> int:
        return sum(
            [
                len(o.token_ids)
                async for o in engine.generate(f"request {i}", sampling_params=params)
            ]
        )

    start = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - start
    if set(counts) != {tokens}:
        raise CheckFailed(f"omni-core requests produced {sorted(set(counts))} tokens")
    return n * tokens / wall


async def _bare_workload(model: str, n: int, tokens: int, runs: int = 1) -> float:
    """The same workload on a bare vLLM ``AsyncLLM`` (median of ``runs`` on one engine), after
    the same warm-up as omni-core's (:data:`WARM_TOKENS`)."""
    from omni_core.kinds import vllm_adapter as va

    phase("bare AsyncLLM: starting the engine")
    llm = va.build_async_llm(model, enforce_eager=True, disable_log_stats=True, **ENGINE_ARGS)
    try:

        def params(max_tokens: int) -> Any:
            return va.VllmSamplingParams(
                max_tokens=max_tokens,
                temperature=0.8,
                seed=1,
                ignore_eos=True,
                output_kind=va.RequestOutputKind.DELTA,
            )

        async def one(i: int, run: str, max_tokens: int) -> int:
            got = 0
            sampling = params(max_tokens)
            async for out in llm.generate(f"request {i}", sampling, request_id=f"b{run}-{i}"):
                got += len(out.outputs[0].token_ids)
            return got

        phase(f"bare AsyncLLM: warm-up, {n}x{WARM_TOKENS} tokens")
        await asyncio.gather(*(one(i, "warm", WARM_TOKENS) for i in range(n)))
        rates = []
        for run in range(runs):
            phase(f"bare AsyncLLM: {n}x{tokens} tokens, run {run + 1}/{runs}")
            start = time.perf_counter()
            counts = await asyncio.gather(*(one(i, str(run), tokens) for i in range(n)))
            rates.append(n * tokens / (time.perf_counter() - start))
            if set(counts) != {tokens}:
                raise CheckFailed(f"AsyncLLM requests produced {sorted(set(counts))} tokens")
    finally:
        llm.shutdown()
        llm = None  # collected now, while the loop lives (its __del__ fails at interpreter exit)
        import gc

        gc.collect()
    return statistics.median(rates)


def _tiny_omni(mode: str) -> PipelineConfig:
    from importlib import resources

    text = resources.files("omni_core.pipelines").joinpath("tiny-omni.yaml").read_text()
    if mode == "on_finish":
        text = text.replace("mode: stream, chunk: 8", "mode: on_finish").replace(
            "mode: stream, chunk: 6", "mode: on_finish"
        )
    return PipelineConfig.from_yaml_text(text, source=f"<tiny-omni {mode}>")


def _stage_compute_s(engine: AsyncOmniEngine) -> float:
    """Engine time all stage processes reported so far (their workers time every ``step()`` and
    every request or input they hand their engine)."""
    pools = engine._runtime.orchestrator.pools  # type: ignore[union-attr]
    return sum(getattr(c, "compute_s", 0.0) for p in pools.values() for c in p.clients)


def _time_to_first_audio(engine: AsyncOmniEngine, runs: int) -> tuple[float, float, float]:
    """Medians of (time to first audio, the stages' compute until then, orchestrator-thread CPU
    share of the request's wall time). One request at a time, so the compute is all its own."""
    tid = engine._runtime.thread.native_id  # type: ignore[union-attr]
    ttfas, computes, shares = [], [], []

    async def once(i: int) -> None:
        start = time.perf_counter()
        cpu0 = thread_cpu_s(tid)
        compute0 = _stage_compute_s(engine)
        first = None
        async for out in engine.generate(f"first audio {i}"):
            if first is None and out.output_type == "audio" and out.payload is not None:
                first = time.perf_counter() - start
                computes.append(_stage_compute_s(engine) - compute0)
        wall = time.perf_counter() - start
        if first is None:
            raise CheckFailed("tiny-omni produced no audio")
        ttfas.append(first)
        shares.append((thread_cpu_s(tid) - cpu0) / wall)

    for i in range(runs):
        phase(f"tiny-omni: first audio, request {i + 1}/{runs}")
        asyncio.run(once(i))
    return statistics.median(ttfas), statistics.median(computes), statistics.median(shares)


def bench_vllm(quick: bool) -> list[Row]:
    from omni_core.models import ensure_model

    settings = OmniSettings()
    phase("building tiny-thinker (first use only)")
    model = str(ensure_model("tiny-thinker", settings.cache_dir))
    n, tokens = (16, 16) if quick else (64, 32)
    runs = 1 if quick else 3  # medians: one run of a few tenths of a second is noisy here
    one_stage = PipelineConfig.from_dict(
        {
            "name": "bench-vllm",
            "stages": [
                {
                    "id": 0,
                    "name": "llm",
                    "kind": "vllm",
                    "final_output": True,
                    "engine_args": {"model": model, **ENGINE_ARGS, "request_output_payload": False},
                }
            ],
        },
        source="<bench vllm>",
    )
    phase("omni-core: starting the one-stage pipeline")
    engine = _engine(one_stage, settings)
    try:
        omni_rate = asyncio.run(_omni_workload(engine, n, tokens, runs))
    finally:
        engine.shutdown()
    bare_rate = asyncio.run(_bare_workload(model, n, tokens, runs))
    rows = [
        Row("vllm", f"{n}x{tokens} tokens", "bare AsyncLLM", bare_rate, "tok/s"),
        Row(
            "vllm",
            f"{n}x{tokens} tokens",
            "one-stage omni-core",
            omni_rate,
            "tok/s",
            bare_rate,
            "bare AsyncLLM",
        ),
    ]
    results: dict[str, Any] = {}
    for mode in ("stream",) if quick else ("stream", "on_finish"):
        phase(f"tiny-omni, {mode} edges: starting (3 stages)")
        engine = _engine(_tiny_omni(mode), settings)
        try:
            phase(f"tiny-omni, {mode} edges: warm-up")
            asyncio.run(_omni_workload_warm(engine))
            results[mode] = _time_to_first_audio(engine, 2 if quick else 5)
        finally:
            engine.shutdown()
    if quick:  # one engine fewer: the stream edges' first audio, no on_finish baseline
        ttfa, compute, cpu_share = results["stream"]
        case = "tiny-omni stream edges"
        rows.append(Row("vllm", case, "time to first audio", ttfa * 1e3, "ms"))
        rows.append(Row("vllm", case, "stages' compute until first audio", compute * 1e3, "ms"))
        rows.append(
            Row("vllm", case, "orchestrator-thread CPU / request wall", cpu_share * 100, "%")
        )
        return rows
    rows.append(
        Row(
            "vllm",
            "tiny-omni on_finish edges",
            "time to first audio",
            results["on_finish"][0] * 1e3,
            "ms",
        )
    )
    rows.append(
        Row(
            "vllm",
            "tiny-omni stream edges",
            "time to first audio",
            results["stream"][0] * 1e3,
            "ms",
            results["on_finish"][0] * 1e3,
            "on_finish edges",
        )
    )
    for mode in ("on_finish", "stream"):
        ttfa, compute, cpu_share = results[mode]
        case = f"tiny-omni {mode} edges"
        rows.append(Row("vllm", case, "stages' compute until first audio", compute * 1e3, "ms"))
        rows.append(
            Row(
                "vllm",
                case,
                "orchestration share of first audio",
                max(0.0, ttfa - compute) / ttfa * 100,
                "%",
            )
        )
        rows.append(
            Row("vllm", case, "orchestrator-thread CPU / request wall", cpu_share * 100, "%")
        )
    return rows


async def _omni_workload_warm(engine: AsyncOmniEngine) -> None:
    async for _ in engine.generate("warm up"):
        pass
