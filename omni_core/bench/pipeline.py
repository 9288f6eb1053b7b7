"""``omni bench pipeline``: tiny-omni (thinker → talker on vLLM → vocoder) under closed-loop
concurrency against a hand-wired chain of the same three engines (:mod:`omni_core.bench.chain`),
in the same run.

Every request asks for exactly 24 thinker and 12 talker tokens (``ignore_eos``), so both sides
do the same work; the check is that every request of both got the whole audio (12 codes' worth of
samples). With ``stream`` edges the talker's context is interleaved (thinker chunk, talker
segment, ...: docs/stages.md) and each of the 3 thinker chunks of 8 generates its own segment, so
there the talker asks for 12 / 3 = 4 tokens per segment and the vocoder voices chunks of 4 codes:
the same 12 talker tokens and the same audio per request as ``on_finish`` (like for like; the
tokens each stage generated per request are printed per mode).

Every side (the chain, each omni-core mode) is started once and runs the whole load in each of
``ROUNDS`` interleaved rounds (``--quick``: one), the order rotated by one side per round. Figures
per concurrency C, medians over the rounds: requests/s and p50/p99 time to first audio, omni-core
with ``on_finish`` edges against the chain (which forwards on finish too); outside ``--quick``
also with ``on_finish`` edges and no text output (``audio only``: like the chain, which streams
no text to its caller) and with ``stream`` edges, with ``stream`` against ``on_finish`` (rates)
and against the chain (p50 first audio) as medians of the per-round ratios. Per request in each
mode, counts rather than times: the prompt tokens each vLLM stage prefilled (prefix-cache hits
left out), the tokens generated, each vLLM stage's engine steps, the inputs appended to the
talker's and the vocoder's requests. Then the CPU of every process of each pipeline over idle
seconds with no request. First, the per-output cost of the stage-process wire
(:mod:`omni_core.bench.wire_cost`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

from omni_core.bench.orchestration import CheckFailed, Row
from omni_core.bench.progress import phase
from omni_core.bench.wire_cost import wire_rows
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.plugin.hooks import PluginHost

LEVELS = (1, 8, 32)
THINKER_TOKENS, TALKER_TOKENS = 24, 12
THINKER_CHUNK = 8  # tiny-omni's thinker → talker stream edge
SEGMENTS = THINKER_TOKENS // THINKER_CHUNK  # talker segments per request with ``stream`` edges
STREAM_VOCODER_CHUNK = TALKER_TOKENS // SEGMENTS  # codes per vocoder chunk with ``stream`` edges
ENGINE_ARGS = {  # the vllm kind's defaults, for the chain
    "max_model_len": 512,
    "max_num_seqs": 64,
    "kv_cache_memory_bytes": 64 << 20,
    "dtype": "float32",
    "seed": 0,
}
PARAMS = {
    "thinker": {
        "max_tokens": THINKER_TOKENS,
        "temperature": 0.8,
        "seed": 0,
        "extra": {"vllm": {"ignore_eos": True}},
    },
    "talker": {
        "max_tokens": TALKER_TOKENS,
        "temperature": 0.8,
        "seed": 0,
        "extra": {"vllm": {"ignore_eos": True}},
    },
}


def params(mode: str) -> dict[str, Any]:
    """The sampling params per stage for a mode: with ``stream`` edges the talker's 12 tokens are
    split over the segments (one per thinker chunk), so every mode generates the same tokens."""
    if mode != "stream":
        return PARAMS
    return {**PARAMS, "talker": {**PARAMS["talker"], "max_tokens": TALKER_TOKENS // SEGMENTS}}


Run = Callable[[int], Awaitable[tuple[float, int]]]  # request i → (time to first audio, samples)


def prompt(i: int) -> list[int]:
    return [10 + (i * 7 + k) % 50 for k in range(8)]


async def closed_loop(run: Run, concurrency: int, total: int) -> tuple[float, list[float]]:
    """``concurrency`` clients, each sending its next request when its last one finished, until
    ``total`` requests ran: (requests/s, every request's time to first audio)."""
    next_id = iter(range(total))
    firsts: list[float] = []
    samples: set[int] = set()

    async def client() -> None:
        for i in next_id:
            first, n = await run(i)
            firsts.append(first)
            samples.add(n)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    if len(firsts) != total or len(samples) != 1:
        raise CheckFailed(f"{len(firsts)}/{total} requests done, audio lengths {sorted(samples)}")
    return total / wall, firsts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


GLOO = "gloo"  # vLLM's torch.distributed (gloo) threads: they poll, engine or not


def cpu_s(pids: list[int], skip: str | None = None) -> float:
    """CPU time of these processes' threads, from each thread's ``schedstat`` (nanoseconds:
    ``stat``'s 10 ms clock ticks are too coarse for an idle second); ``skip``: leave out the
    threads whose name starts with it."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                if skip is not None:
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        if f.read().startswith(skip):
                            continue
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):  # a thread that just ended
                continue
    return total / 1e9


def idle_share(pids: list[int], seconds: float) -> tuple[float, float]:
    """Shares of one core all ``pids`` used over ``seconds`` with nothing to do: in all, and
    without vLLM's gloo threads."""
    time.sleep(0.5)  # the last request's stragglers (OpenMP spin-waits...)
    before, before_own = cpu_s(pids), cpu_s(pids, GLOO)
    time.sleep(seconds)
    return (cpu_s(pids) - before) / seconds, (cpu_s(pids, GLOO) - before_own) / seconds


def _tiny_omni(mode: str) -> PipelineConfig:
    """tiny-omni as shipped (``stream``), with ``on_finish`` edges, or with ``on_finish`` edges
    and no text output (``audio only``: the thinker's deltas go nowhere, as in the chain)."""
    from importlib import resources

    text = resources.files("omni_core.pipelines").joinpath("tiny-omni.yaml").read_text()
    if f"mode: stream, chunk: {THINKER_CHUNK}" not in text or "mode: stream, chunk: 6" not in text:
        raise CheckFailed("tiny-omni's stream edges changed: update omni_core/bench/pipeline.py")
    if mode == "stream":
        vocoder_edge = f"mode: stream, chunk: {STREAM_VOCODER_CHUNK}"
        text = text.replace("mode: stream, chunk: 6", vocoder_edge)
    else:
        text = text.replace("mode: stream, chunk: 8", "mode: on_finish").replace(
            "mode: stream, chunk: 6", "mode: on_finish"
        )
    if mode == "audio only":
        text = text.replace("    final_output: true\n    final_output_type: text\n", "", 1)
    return PipelineConfig.from_yaml_text(text, source=f"<tiny-omni {mode}>")


def _omni_run(engine: AsyncOmniEngine, mode: str, text_tokens: list[int]) -> Run:
    """One request through the engine; the text tokens it streamed are added to
    ``text_tokens[0]``."""
    sampling = params(mode)

    async def run(i: int) -> tuple[float, int]:
        start = time.perf_counter()
        first, samples = 0.0, 0
        async for out in engine.generate(prompt(i), sampling_params=sampling):
            if out.output_type == "audio" and out.payload is not None:
                if not samples:
                    first = time.perf_counter() - start
                samples += len(out.payload.samples)
            elif out.output_type == "text":
                text_tokens[0] += len(out.token_ids)
        return first, samples

    return run


def _omni_pids(engine: AsyncOmniEngine) -> list[int]:
    pools = engine._runtime.orchestrator.pools  # type: ignore[union-attr]
    pids = [getattr(c, "pid", None) for p in pools.values() for c in p.clients]
    return [os.getpid(), *(pid for pid in pids if pid is not None)]


Levels = dict[int, tuple[float, list[float]]]  # C -> (requests/s, every time to first audio)


def _measure(run: Run, levels: tuple[int, ...], quick: bool) -> Levels:
    asyncio.run(closed_loop(run, 1, 1))  # warm-up
    results = {}
    for c in levels:
        results[c] = asyncio.run(closed_loop(run, c, _total(c, quick)))
    return results


def _total(c: int, quick: bool) -> int:
    return max(2, c) if quick else max(8, 3 * c)


def _hop(settings: OmniSettings) -> int:
    """Audio samples per talker code (the tiny vocoder's ``hop``)."""
    import json

    from omni_core.models import ensure_model

    path = ensure_model("tiny-vocoder", settings.cache_dir) / "config.json"
    return int(json.loads(path.read_text())["hop"])


def _vllm_states(engine: AsyncOmniEngine) -> list[dict[str, Any]]:
    """The vllm kind's ``get_state`` of each vLLM stage (thinker, talker): prompt tokens sent to
    prefill so far (prefix-cache hits left out), engine steps taken."""
    return list(asyncio.run(engine.collective_rpc("get_state", stage_ids=[0, 1])))


def _count_inputs(engine: AsyncOmniEngine) -> dict[str, list[int]]:
    """Per stage name, a counter of the inputs appended to its requests (``add_input``: one
    message per ``stream``-edge chunk after the first), kept by wrapping its clients."""
    counts: dict[str, list[int]] = {}
    for pool in engine._runtime.orchestrator.pools.values():  # type: ignore[union-attr]
        count = counts[pool.stage.name] = [0]
        for client in pool.clients:
            if client is not None:
                client.add_input = _counting(client.add_input, count)  # type: ignore[method-assign]
    return counts


def _counting(add_input: Callable[..., Awaitable[None]], count: list[int]) -> Any:
    async def counted(request_id: str, prompt: Any, final: bool) -> None:
        count[0] += 1
        await add_input(request_id, prompt, final)

    return counted


class Side:
    """One pipeline under test, started once and measured in every round: ``run`` sends one
    request; ``pids`` are its processes; ``counts()`` (omni-core only) returns figures per request
    so far (tokens prefilled and generated, engine steps, inputs appended: the work the modes are
    compared by)."""

    def __init__(
        self,
        run: Run,
        pids: list[int],
        counts: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.requests = 0
        self.samples = 0  # the audio samples of the last request (all are checked equal)
        self.pids = pids
        self.counts = counts

        async def counted(i: int) -> tuple[float, int]:
            first, n = await run(i)
            self.requests += 1
            self.samples = n
            return first, n

        self.run: Run = counted


def _omni(mode: str, settings: OmniSettings, stack: ExitStack) -> Side:
    engine = AsyncOmniEngine(
        _tiny_omni(mode),
        settings=settings,
        plugins=PluginHost.create(settings, load_entry_points=False),
    )
    stack.callback(engine.shutdown)
    text_tokens = [0]
    inputs = _count_inputs(engine)

    def counts() -> dict[str, float]:
        n = max(side.requests, 1)
        thinker, talker = _vllm_states(engine)
        return {
            "thinker prefilled tokens/request": thinker.get("prefilled_tokens", 0) / n,
            "talker prefilled tokens/request": talker.get("prefilled_tokens", 0) / n,
            "thinker text tokens out/request": text_tokens[0] / n,
            "talker (audio / hop) tokens out/request": side.samples / _hop(settings),
            "thinker engine steps/request": thinker.get("engine_steps", 0) / n,
            "talker engine steps/request": talker.get("engine_steps", 0) / n,
            "talker inputs appended/request": inputs["talker"][0] / n,
            "vocoder inputs appended/request": inputs["vocoder"][0] / n,
        }

    side = Side(_omni_run(engine, mode, text_tokens), _omni_pids(engine), counts)
    return side


def _chain(settings: OmniSettings, stack: ExitStack) -> Side:
    from omni_core.bench.chain import HandChain
    from omni_core.models import ensure_model

    models = [str(ensure_model(m, settings.cache_dir)) for m in ("tiny-thinker", "tiny-talker")]
    vocoder = str(ensure_model("tiny-vocoder", settings.cache_dir))
    chain = HandChain(models[0], models[1], vocoder, ENGINE_ARGS)
    stack.callback(chain.close)

    async def run(i: int) -> tuple[float, int]:
        start = time.perf_counter()
        audio = await chain.run(f"r{i}-{time.perf_counter_ns()}", prompt(i))
        return time.perf_counter() - start, len(audio)

    return Side(run, [os.getpid(), *chain.pids])


CHAIN = "hand-wired chain"
ROUNDS = 3  # interleaved rounds (outside --quick): the figures are medians over them


def rounds(sides: dict[str, Side], n: int, quick: bool) -> dict[str, list[Levels]]:
    """``n`` rounds; in each, every side runs the whole load (each level) once, the order rotated
    by one side per round (who runs first, right after the machine's last idle spell, changes)."""
    names = list(sides)
    results: dict[str, list[Levels]] = {name: [] for name in names}
    for r in range(n):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            levels = ", ".join(str(c) for c in LEVELS)
            phase(f"round {r + 1}/{n}: {name}, C = {levels}")
            results[name].append(_measure(sides[name].run, LEVELS, quick))
    return results


def _median_rows(results: dict[str, list[Levels]], modes: tuple[str, ...]) -> list[Row]:
    """Per C: each side's median requests/s and p50/p99 time to first audio over the rounds,
    against the chain's medians; then ``stream`` against ``on_finish`` and the chain as the
    median of the per-round ratios (each against the same round's other side)."""
    rows = []

    def med(name: str, c: int, fig: Callable[[tuple[float, list[float]]], float]) -> float:
        return statistics.median(fig(levels[c]) for levels in results[name])

    def rate(m: tuple[float, list[float]]) -> float:
        return m[0]

    def p50(m: tuple[float, list[float]]) -> float:
        return percentile(m[1], 0.5) * 1e3

    def p99(m: tuple[float, list[float]]) -> float:
        return percentile(m[1], 0.99) * 1e3

    for c in LEVELS:
        base_rate = med(CHAIN, c, rate)
        rows.append(Row("pipeline", f"C={c} {CHAIN}", "requests/s", base_rate, "req/s"))
        firsts = {"p50": p50, "p99": p99}
        for name, fig in firsts.items():
            value = med(CHAIN, c, fig)
            rows.append(
                Row("pipeline", f"C={c} {CHAIN}", f"{name} time to first audio", value, "ms")
            )
        for mode in modes:
            case = f"C={c} omni-core {mode}"
            rows.append(
                Row("pipeline", case, "requests/s", med(mode, c, rate), "req/s", base_rate, CHAIN)
            )
            for name, fig in firsts.items():  # ratio < 1: omni-core's audio is earlier
                value, base = med(mode, c, fig), med(CHAIN, c, fig)
                rows.append(
                    Row("pipeline", case, f"{name} time to first audio", value, "ms", base, CHAIN)
                )
        if "stream" in modes and len(results["stream"]) > 1:
            per_round = [
                (s[c][0] / f[c][0], p50(s[c]) / p50(b[c]))
                for s, f, b in zip(
                    results["stream"], results["on_finish"], results[CHAIN], strict=True
                )
            ]
            rows.append(
                Row(
                    "pipeline",
                    f"C={c} stream vs on_finish",
                    "requests/s ratio, median of rounds",
                    statistics.median(r[0] for r in per_round),
                    "x",
                )
            )
            rows.append(
                Row(
                    "pipeline",
                    f"C={c} stream vs {CHAIN}",
                    "p50 first audio ratio, median of rounds",
                    statistics.median(r[1] for r in per_round),
                    "x",
                )
            )
    return rows


def bench_pipeline(quick: bool, n_rounds: int | None = None) -> list[Row]:
    settings = OmniSettings()
    idle_s = 1.0 if quick else 3.0
    modes = ("on_finish",) if quick else ("on_finish", "audio only", "stream")
    n_rounds = n_rounds or (1 if quick else ROUNDS)
    with ExitStack() as stack:
        phase(f"starting the {CHAIN} (3 engines)")
        sides = {CHAIN: _chain(settings, stack)}
        for mode in modes:
            phase(f"starting tiny-omni, {mode} (3 stages)")
            sides[mode] = _omni(mode, settings, stack)
        results = rounds(sides, n_rounds, quick)
        samples = {side.samples for side in sides.values()}
        if len(samples) != 1:
            raise CheckFailed(f"the sides' requests got different audio lengths: {samples}")
        counts = {mode: sides[mode].counts() for mode in modes}  # type: ignore[misc]
        phase(f"idle CPU, {idle_s:.0f} s per side")
        idle = {name: idle_share(side.pids, idle_s) for name, side in sides.items()}
    phase("the stage-process wire's cost per output")
    rows = wire_rows(quick)
    rows.extend(_median_rows(results, modes))
    for mode in modes:
        for figure, value in counts[mode].items():
            unit = "steps" if "steps" in figure else "msg" if "inputs" in figure else "tok"
            rows.append(Row("pipeline", f"omni-core {mode}", figure, value, unit))
    for name, share in idle.items():
        label = name if name == CHAIN else f"omni-core {name}"
        rows.append(Row("pipeline", "idle, all processes", label, share[0] * 100, "% core"))
        rows.append(
            Row("pipeline", "idle, without vLLM's gloo threads", label, share[1] * 100, "% core")
        )
    return rows
