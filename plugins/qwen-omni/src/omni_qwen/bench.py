"""``omni bench qwen-omni``: time to first audio of ``qwen2.5-omni`` (tiny checkpoint) with a
``stream`` thinker → talker edge against an ``on_finish`` one, in the same run, and the
orchestration share of that first audio.

* time to first audio: ``AsyncOmniEngine.generate`` of one chat prompt, from the call to the
  first output carrying audio (token2wav's waveform: the talker's codes whole), one request at a
  time, after a warm-up request; the median of the runs.
* stage compute: the engine time the stage processes reported until that output (each worker
  times its engine's ``step()`` and the requests and inputs it hands it:
  :attr:`ProcessStageClient.compute_s <omni_core.stage.process.ProcessStageClient.compute_s>`).
* orchestration share: ``(time to first audio - critical-path compute) / time to first audio``:
  what the orchestrator, the process hops and the data plane add. The critical path is all the
  stages' compute with ``on_finish`` (one after the other); with ``stream`` the thinker and the
  talker compute at the same time, so it is the longer of the two plus token2wav, and the share
  an upper bound (waits inside the overlap count as orchestration).

The engines are built on the tiny checkpoint with the stage kinds wrapped so the bench can read
each replica's client (:class:`_Recorder`: the same factory, config model and renderer under
another name). Thinker and talker are greedy and token2wav seeded, so both edges must voice the
same codes: a difference, or a request without audio, fails the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
import types
from typing import Any

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.plugin import PLUGIN_API_VERSION, CheckFailed, PluginHost, Row, hookimpl
from omni_qwen.pipelines import TINY_MODEL, omni_pipeline

BENCH = "qwen-omni"
EDGES = ("on_finish", "stream")
PROMPT = "<|im_start|>user\nTell me about the sea.<|im_end|>\n<|im_start|>assistant\n"
TIMED = "bench-timed-"  # prefix of the wrapped stage kinds


class _Recorder:
    """A plugin registering ``bench-timed-<kind>`` for each stage kind of the pipeline, whose
    factory is the original one and remembers the clients it built, by stage name."""

    def __init__(self, host: PluginHost, kinds: set[str]) -> None:
        self.clients: list[tuple[str, Any]] = []
        registered = host.stage_kinds()

        def wrap(kind: Any) -> Any:
            def factory(stage: Any, replica: int, context: Any) -> Any:
                client = kind.client_factory(stage, replica, context)
                self.clients.append((stage.name, client))
                return client

            return dataclasses.replace(kind, name=TIMED + kind.name, client_factory=factory)

        wrapped = [wrap(registered[name]) for name in sorted(kinds)]
        module = types.ModuleType("omni_qwen_bench_recorder")
        module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

        @hookimpl
        def omni_register_stage_kinds() -> list[Any]:
            return wrapped

        module.omni_register_stage_kinds = omni_register_stage_kinds  # type: ignore[attr-defined]
        host.register(module, "omni-qwen-bench")

    def compute_s(self) -> dict[str, float]:
        """Engine seconds each stage's replicas reported so far."""
        totals: dict[str, float] = {}
        for name, client in self.clients:
            totals[name] = totals.get(name, 0.0) + float(getattr(client, "compute_s", 0.0))
        return totals


def timed(config: PipelineConfig) -> PipelineConfig:
    """``config`` with every stage on its ``bench-timed-`` kind."""
    data = config.model_dump(exclude_unset=True)
    for stage in data["stages"]:
        stage["kind"] = TIMED + stage["kind"]
    return PipelineConfig.from_dict(data, source=f"{config.source} (bench)")


def stage_params(thinker_tokens: int, codes: int) -> dict[str, Any]:
    return {
        "thinker": {"max_tokens": thinker_tokens, "temperature": 0.0},
        "talker": {"temperature": 0.0, "repetition_penalty": 1.05, "max_tokens": codes},
        "token2wav": {"seed": 0},
    }


def critical_path(edge: str, compute: dict[str, float]) -> float:
    """The stages' compute the first audio must wait for: all of it one after the other with
    ``on_finish``; with ``stream`` the thinker and the talker overlap, so the longer of the two,
    then token2wav (a lower bound on the stages' part: the rest is the orchestration's, at
    most)."""
    thinker, talker, token2wav = (compute.get(n, 0.0) for n in ("thinker", "talker", "token2wav"))
    if edge == "stream":
        return max(thinker, talker) + token2wav
    return thinker + talker + token2wav


async def first_audio(
    engine: AsyncOmniEngine, recorder: _Recorder, params: dict[str, Any]
) -> tuple[float, dict[str, float], list[int]]:
    """(time to first audio, each stage's compute until then, the codes voiced) of one request."""
    start = time.perf_counter()
    compute0 = recorder.compute_s()
    found: tuple[float, dict[str, float], list[int]] | None = None
    async for out in engine.generate(PROMPT, sampling_params=params):
        if out.error is not None:
            raise CheckFailed(f"{BENCH}: the request failed: {out.error.message}")
        if found is None and out.output_type == "audio" and out.payload is not None:
            now = recorder.compute_s()
            compute = {name: now[name] - compute0.get(name, 0.0) for name in now}
            found = (time.perf_counter() - start, compute, list(out.token_ids))
    if found is None:
        raise CheckFailed(f"{BENCH}: a request produced no audio")
    return found


def measure(
    edge: str, settings: OmniSettings, runs: int, params: dict[str, Any]
) -> tuple[float, float, float, list[int]]:
    """Medians of (time to first audio, the stages' compute until then, its critical path) with
    ``edge``, and the codes (the same in every run, else CheckFailed)."""
    host = PluginHost.create(settings)
    config = omni_pipeline(TINY_MODEL, edge)
    recorder = _Recorder(host, {stage.kind for stage in config.stages})
    engine = AsyncOmniEngine(timed(config), settings=settings, plugins=host)
    try:
        asyncio.run(first_audio(engine, recorder, params))  # warm-up
        results = [asyncio.run(first_audio(engine, recorder, params)) for _ in range(runs)]
    finally:
        engine.shutdown()
    codes = results[0][2]
    if any(r[2] != codes for r in results):
        raise CheckFailed(f"{BENCH}: {edge} edges voiced different codes from run to run")
    return (
        statistics.median(r[0] for r in results),
        statistics.median(sum(r[1].values()) for r in results),
        statistics.median(critical_path(edge, r[1]) for r in results),
        codes,
    )


def bench_qwen_omni(quick: bool) -> list[Row]:
    settings = OmniSettings()
    runs, thinker_tokens, codes = (2, 8, 24) if quick else (5, 32, 100)
    params = stage_params(thinker_tokens, codes)
    measured = {edge: measure(edge, settings, runs, params) for edge in EDGES}
    if measured["stream"][3] != measured["on_finish"][3]:
        raise CheckFailed(f"{BENCH}: stream and on_finish edges voiced different codes")
    case = f"tiny, {thinker_tokens} text tokens, {codes} codes"
    base = measured["on_finish"][0] * 1e3
    rows = []
    for edge in EDGES:
        ttfa, compute, critical, _ = measured[edge]
        name = f"{case}, {edge} thinker->talker"
        rows.append(
            Row(
                BENCH,
                name,
                "time to first audio",
                ttfa * 1e3,
                "ms",
                base if edge == "stream" else None,
                "on_finish" if edge == "stream" else "",
            )
        )
        rows.append(Row(BENCH, name, "stage compute until first audio", compute * 1e3, "ms"))
        rows.append(Row(BENCH, name, "  on the critical path", critical * 1e3, "ms"))
        share = (ttfa - critical) / ttfa * 100
        rows.append(Row(BENCH, name, "orchestration share of first audio", share, "%"))
    return rows
