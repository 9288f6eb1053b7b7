"""``omni bench qwen3-tts-talker``: the Qwen3-TTS talker + code predictor engine's throughput,
decode steps batched across concurrent requests vs one forward per request (``max_batch`` 1), in
the same run.

The engine (:mod:`omni_qwen3_tts.talker`, ``tiny-qwen3-tts`` custom voice) runs in this process on
one torch thread (the ``torch`` stage's default). Per level C, C requests with different texts are
added at once and stepped to the end, greedy, ``frames`` frames each, unbatched then batched, two
rounds, the faster of each. Figures: requests/s and frames/s (batched, baseline the unbatched
run) and the talker forwards each took. Check (a failure raises ``CheckFailed``): both runs give
every request the same codes. ``--quick``: C = 8, 8 frames.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from omni_core.plugin import CheckFailed, Row

BENCH = "qwen3-tts-talker"
LEVELS = (8, 16)
ROUNDS = 2
WORDS = "hello world read the news today please calm voice morning weather story".split()


def _run(engine: Any, count: int, frames: int, batch: int) -> tuple[float, dict[str, Any], int]:
    from omni_core import SamplingParams

    engine.options.max_batch = batch
    before = engine.forwards["talker"]
    started = time.perf_counter()
    for n in range(count):
        text = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(4 + n % 5))
        params = SamplingParams(
            temperature=0.0,
            repetition_penalty=1.05,
            max_tokens=frames,
            extra={"voice": "ryan", "language": "english"},
        )
        engine.add(
            SimpleNamespace(
                request_id=f"b{n}",
                prompt=text,
                params=params,
                stream_outputs=False,
                streaming_input=False,
            )
        )
    codes: dict[str, Any] = {}
    while engine.has_work():
        for out in engine.step():
            if out.error is not None:
                raise CheckFailed(f"{BENCH}: request {out.request_id}: {out.error.message}")
            codes.setdefault(out.request_id, []).extend(out.token_ids)
    return time.perf_counter() - started, codes, engine.forwards["talker"] - before


def measure(engine: Any, levels: tuple[int, ...], frames: int) -> list[Row]:
    rows = []
    for count in levels:
        best: dict[int, tuple[float, dict[str, Any], int]] = {}
        for _ in range(ROUNDS):
            for batch in (1, 64):
                run = _run(engine, count, frames, batch)
                if batch not in best or run[0] < best[batch][0]:
                    best[batch] = run
        (alone, codes1, f1), (together, codes64, f64) = best[1], best[64]
        if codes1 != codes64:
            raise CheckFailed(f"{BENCH}: C={count}: batched codes differ from unbatched")
        total = sum(len(c) for c in codes64.values()) / engine.groups
        case = f"C={count}"
        rows += [
            Row(BENCH, case, "requests/s", count / together, "req/s", count / alone, "unbatched"),
            Row(BENCH, case, "frames/s", total / together, "frames/s", total / alone, "unbatched"),
            Row(BENCH, case, "talker forwards", f64, "forwards", f1, "unbatched"),
        ]
    return rows


def bench_talker(quick: bool) -> list[Row]:
    """The rows of ``omni bench qwen3-tts-talker``."""
    import torch

    from omni_core import OmniSettings
    from omni_core.extend import resolve_model
    from omni_core.plugin import PluginHost
    from omni_qwen3_tts.talker import build

    path = resolve_model("tiny-qwen3-tts", PluginHost.create(OmniSettings()))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the talker's stage process runs it
    try:
        engine = build({"model": str(path), "threads": 1, "options": {}})
        _run(engine, 2, 2, 64)  # warm-up
        return measure(engine, (8,) if quick else LEVELS, 8 if quick else 24)
    finally:
        torch.set_num_threads(threads)
