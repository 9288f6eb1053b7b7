"""``omni bench qwen3-omni``: speech-out metrics of ``qwen3-omni`` (tiny checkpoint), code2wav
streamed vs whole-utterance in the same run, at C = 1, 4 and 16 concurrent requests.

The measurement is omni-qwen's for Qwen2.5-Omni (:mod:`omni_qwen.speech_bench`), reused as is:
per request, from the ``generate()`` call, **TTFP** (time to the first output carrying audio),
**RTF** (time to the last audio / the audio's duration) and **underruns** (audio chunks arriving
after the audio received before them, played from its arrival at real time, ran out); p50 / p99
over the requests of a level. Its requests are Qwen2.5-Omni's (the same chat prompt, the thinker
held to 16 tokens, greedy, the talker forced to ``frames`` codec frames by its ``max_tokens``, the
vocoder's generic ``extra["audio_stream"]`` option); :class:`_Qwen3Engine` hands them to
``qwen3-omni``, whose vocoder stage is ``code2wav`` rather than ``token2wav``.

The two modes run on one engine, level by level and interleaved (the same load for both). Checks
(a failure raises :class:`~omni_core.plugin.CheckFailed`): every request gets audio, and streamed
and whole requests get the same duration of it (greedy: the same frames).
At least 5 requests per level and mode (C = 1: 5 rounds); 100 frames (8 s of speech) each.
``--quick``: C = 1 only, one request per mode, 24 frames (under a minute on a loaded 2-core
machine).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import AsyncIterator
from typing import Any

from omni_qwen.api import Speech, level, pct

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.plugin import CheckFailed, Row
from omni_qwen3.pipelines import omni_pipeline

logger = logging.getLogger(__name__)

BENCH = "qwen3-omni"
LEVELS = (1, 4, 16)
MODES = {False: "whole", True: "streamed"}
STAGE_NAMES = {"token2wav": "code2wav"}  # speech_bench's (qwen2.5-omni) -> qwen3-omni's


class _Qwen3Engine:
    """An engine taking :mod:`omni_qwen.speech_bench`'s per-stage sampling params (Qwen2.5-Omni's
    stage names) and passing them to a ``qwen3-omni`` engine under its stage names."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def generate(self, prompt: Any, sampling_params: dict[str, Any]) -> AsyncIterator[Any]:
        renamed = {STAGE_NAMES.get(k, k): v for k, v in sampling_params.items()}
        result: AsyncIterator[Any] = self.engine.generate(prompt, sampling_params=renamed)
        return result


def measure(
    engine: Any, frames: int, levels: tuple[int, ...], requests: int
) -> dict[tuple[int, bool], list[Speech]]:
    """Each (level, streamed) -> the speech metrics of at least ``requests`` requests (rounds of
    C at once), the modes' rounds interleaved."""
    got: dict[tuple[int, bool], list[Speech]] = {}
    for c in levels:
        for _ in range(-(-requests // c)):
            for stream in MODES:
                try:
                    speech = asyncio.run(level(engine, frames, stream, c))
                except RuntimeError as e:  # a failed request, or one without audio
                    raise CheckFailed(f"{BENCH}: {MODES[stream]} request at C={c}: {e}") from e
                got.setdefault((c, stream), []).extend(speech)
    return got


def check(got: dict[tuple[int, bool], list[Speech]]) -> None:
    """Streamed and whole requests voiced the same duration (the same greedy frames)."""
    seconds = {round(s.seconds, 6) for speech in got.values() for s in speech}
    if len(seconds) != 1:
        shown = ", ".join(f"{s:.4f}" for s in sorted(seconds))
        raise CheckFailed(f"{BENCH}: requests voiced different durations of audio: {shown} s")


def rows(got: dict[tuple[int, bool], list[Speech]], frames: int) -> list[Row]:
    """p50 / p99 of TTFP, RTF and underruns per level and mode; a streamed TTFP's baseline is
    the whole-utterance one of its level (its ratio: streamed / whole)."""
    out: list[Row] = []
    for (c, stream), speech in got.items():
        case = f"tiny, {frames} frames, C={c}, {MODES[stream]} code2wav"
        ttfp = [s.ttfp * 1e3 for s in speech]
        whole = [s.ttfp * 1e3 for s in got[(c, False)]]
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            base = pct(whole, q) if stream else None
            out.append(Row(BENCH, case, f"TTFP {name}", pct(ttfp, q), "ms", base, "whole"))
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            out.append(Row(BENCH, case, f"RTF {name}", pct([s.rtf for s in speech], q), "x"))
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            counts = [float(s.underruns) for s in speech]
            out.append(Row(BENCH, case, f"underruns {name}", pct(counts, q), "per request"))
        seconds = statistics.median(s.seconds for s in speech)
        out.append(Row(BENCH, case, "audio", seconds, "s"))
    return out


def bench_qwen3_omni(
    quick: bool,
    levels: tuple[int, ...] | None = None,
    frames: int | None = None,
    requests: int | None = None,
) -> list[Row]:
    """The rows of ``omni bench qwen3-omni`` (``levels``, ``frames`` and ``requests``, the least
    per level and mode, to shorten or lengthen a run from Python)."""
    levels = levels or ((1,) if quick else LEVELS)
    frames = frames or (24 if quick else 100)
    requests = requests or (1 if quick else 5)
    engine = AsyncOmniEngine(omni_pipeline(), settings=OmniSettings())
    try:
        qwen3 = _Qwen3Engine(engine)
        measure(qwen3, 8, (1,), 1)  # warm-up: both modes
        got = measure(qwen3, frames, levels, requests)
    finally:
        engine.shutdown()
    check(got)
    return rows(got, frames)
