"""``omni bench video``: Wan text-to-video on the tiny checkpoint, guided (omni-cfg's negative
prompt: two DiT rows per sample), through stage processes.

Rows: milliseconds per denoising step and seconds per clip at C=1; jobs/s at C=1 (one job at a
time, the baseline) and at C=4, with step batching (every sample in flight steps together, as
rows of one DiT forward: ``max_batch`` 8) and without (``max_batch`` 1: one forward per row,
samples still interleaved step by step). Every clip is checked (frame count and size) first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
import time
from typing import Any

from omni_core.plugin import CheckFailed, Row

logger = logging.getLogger(__name__)

SIZE, FRAMES = 64, 17


async def _clip(engine: Any, i: int, steps: int) -> tuple[float, list[float]]:
    """One guided clip: (seconds, the times of its step outputs)."""
    from omni_wan.video import Progress, Video

    params = {
        "dit": {
            "seed": i,
            "extra": {"wan": {"steps": steps}, "cfg": {"negative_prompt": "blurry"}},
        }
    }
    start = time.perf_counter()
    marks = []
    video = None
    async for out in engine.generate(f"a red cat running {i}", sampling_params=params):
        if out.error is not None:
            raise CheckFailed(f"clip {i}: {out.error.message}")
        if isinstance(out.payload, Progress):
            marks.append(time.perf_counter())
        elif isinstance(out.payload, Video):
            video = out.payload.frames
    if video is None or video.shape != (FRAMES, SIZE, SIZE, 3):
        raise CheckFailed(f"clip {i}: no {FRAMES}x{SIZE}x{SIZE} video")
    return time.perf_counter() - start, marks


async def _jobs_per_s(engine: Any, jobs: int, concurrency: int, steps: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await _clip(engine, i, steps)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(jobs)))
    return jobs / (time.perf_counter() - start)


def _engine(max_batch: int) -> Any:
    from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
    from omni_core.plugin import PluginHost
    from omni_wan.pipelines import wan_pipeline

    settings = OmniSettings()
    host = PluginHost.create(settings)
    data = wan_pipeline(host, "2.1", size=SIZE, frames=FRAMES).model_dump(
        mode="json", exclude_none=True
    )
    data["stages"][1]["engine_args"]["max_batch"] = max_batch
    return AsyncOmniEngine(PipelineConfig.from_dict(data), settings=settings, plugins=host)


async def _measure(max_batch: int, jobs: int, steps: int, figures: dict[str, float]) -> None:
    engine = _engine(max_batch)
    try:
        await _clip(engine, 999, 2)  # warm-up
        if max_batch == 8:
            clips = [await _clip(engine, i, steps) for i in range(jobs)]
            per_step = [b - a for _, m in clips for a, b in itertools.pairwise(m)]
            figures["step"] = statistics.median(per_step)
            figures["clip"] = statistics.median(c for c, _ in clips)
            figures["c1"] = await _jobs_per_s(engine, jobs, 1, steps)
        figures[f"c4-{max_batch}"] = await _jobs_per_s(engine, jobs, 4, steps)
    finally:
        engine.shutdown()


def bench_video(quick: bool) -> list[Row]:
    steps = 8 if quick else 20
    jobs = 4 if quick else 12
    figures: dict[str, float] = {}
    for max_batch in (8, 1):
        asyncio.run(_measure(max_batch, jobs, steps, figures))
    case = f"tiny-wan2.1 {SIZE}x{SIZE}x{FRAMES}, {steps} steps, guided"
    c1 = figures["c1"]
    return [
        Row("video", case, "time per denoising step (C=1, p50)", figures["step"] * 1e3, "ms"),
        Row("video", case, "seconds per clip (C=1, p50)", figures["clip"], "s"),
        Row("video", f"{case}, {jobs} jobs", "jobs/s C=1", c1, "jobs/s"),
        Row(
            "video",
            f"{case}, {jobs} jobs",
            "jobs/s C=4, step batching (max_batch 8)",
            figures["c4-8"],
            "jobs/s",
            c1,
            "C=1",
        ),
        Row(
            "video",
            f"{case}, {jobs} jobs",
            "jobs/s C=4, one forward per row (max_batch 1)",
            figures["c4-1"],
            "jobs/s",
            c1,
            "C=1",
        ),
    ]
