"""``omni bench qwen3-tts``: speech out of the ``qwen3-tts`` pipeline (tiny, real stage processes)
as a client hears it, the decoder streamed (4-frame chunks as the talker goes) vs whole (one
decode at the end), at C = 1, 4 and 16 concurrent requests, in one run on one engine.

Per request: TTFP (ms from the call to the first audio), RTF (wall time / audio seconds) and
underruns (a piece arriving after the audio received so far has run out, played from its first
arrival). Each request is seeded (seed n at position n of a level) with ``max_new_tokens``
frames; the tiny talker may stop early at its eos (the audio length is reported). The two modes
alternate level by level, so they see the same load. Check (``CheckFailed``): the same seed
gives the same number of samples streamed and whole. ``--quick``: C = 1 and 4, 24 frames.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from omni_core.plugin import CheckFailed, Row

BENCH = "qwen3-tts"
TEXT = "Hello world, read the news today please, a calm voice for the morning weather story."


@dataclass
class Heard:
    ttfp: float
    rtf: float
    underruns: int
    samples: int
    rate: int


async def one(engine: Any, seed: int, frames: int, stream: bool) -> Heard:
    from omni_core.extend import AUDIO_OPTIONS

    params = engine.request_params(
        {"talker": {"seed": seed, "max_tokens": frames}},
        extra={"voice": "ryan", AUDIO_OPTIONS: {"stream": stream}},
    )
    start = time.perf_counter()
    first = None
    played_until, underruns, samples, rate = 0.0, 0, 0, 24000
    async for out in engine.generate(TEXT, sampling_params=params):
        if out.error is not None:
            raise CheckFailed(f"{BENCH}: {out.error.message}")
        payload = out.payload
        if payload is None or not hasattr(payload, "samples") or not len(payload.samples):
            continue
        now = time.perf_counter() - start
        rate = int(payload.sample_rate)
        if first is None:
            first, played_until = now, now
        elif now > played_until:
            underruns += 1
            played_until = now
        played_until += len(payload.samples) / rate
        samples += len(payload.samples)
    wall = time.perf_counter() - start
    seconds = samples / rate
    return Heard(
        (first or wall) * 1000, wall / seconds if seconds else 0.0, underruns, samples, rate
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def level(engine: Any, count: int, frames: int, stream: bool) -> list[Heard]:
    return list(await asyncio.gather(*(one(engine, n, frames, stream) for n in range(count))))


def measure(engine: Any, levels: tuple[int, ...], frames: int) -> list[Row]:
    rows = []
    for count in levels:
        got = {
            stream: asyncio.run(level(engine, count, frames, stream)) for stream in (True, False)
        }
        for a, b in zip(got[True], got[False], strict=True):
            if a.samples != b.samples:
                raise CheckFailed(f"{BENCH}: C={count}: streamed and whole audio lengths differ")
        case = f"C={count}"
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            ttfp = pct([h.ttfp for h in got[True]], q)
            whole = pct([h.ttfp for h in got[False]], q)
            rows.append(Row(BENCH, case, f"TTFP {name} streamed", ttfp, "ms", whole, "whole"))
            rtf = pct([h.rtf for h in got[True]], q)
            base = pct([h.rtf for h in got[False]], q)
            rows.append(Row(BENCH, case, f"RTF {name} streamed", rtf, "x", base, "whole"))
            runs = pct([float(h.underruns) for h in got[True]], q)
            rows.append(Row(BENCH, case, f"underruns {name} streamed", runs, "per request"))
        seconds = sum(h.samples / h.rate for h in got[True]) / count
        rows.append(Row(BENCH, case, "audio (mean)", seconds, "s"))
    return rows


def bench_tts(quick: bool) -> list[Row]:
    """The rows of ``omni bench qwen3-tts``."""
    from omni_core import AsyncOmniEngine, OmniSettings
    from omni_qwen3_tts.pipelines import tts_pipeline

    engine = AsyncOmniEngine(tts_pipeline(), settings=OmniSettings())
    try:
        asyncio.run(level(engine, 1, 4, True))  # warm-up
        return measure(engine, (1, 4) if quick else (1, 4, 16), 24 if quick else 128)
    finally:
        engine.shutdown()
