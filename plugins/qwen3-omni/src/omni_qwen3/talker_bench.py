"""``omni bench qwen3-omni-talker``: the talker stage engine's throughput, decode steps batched
across concurrent requests vs one forward per request (``max_batch`` 1), in the same run.

The talker (:mod:`omni_qwen3.talker`, tiny checkpoint) runs in this process, fed synthetic thinker
rows (a user turn of 8 to 12 text tokens, a 6-token reply, float32 rows from a fixed seed: the
talker reads no meaning into them), greedy, ``max_tokens`` frames each, on one torch thread (the
``torch`` stage's default). Per level C, C requests are added at once and stepped to the end,
unbatched then batched (the same requests), two rounds, the faster of each; figures: requests/s
and frames/s (batched: baseline the unbatched run) and the talker forwards each took. Check (a
failure raises :class:`~omni_core.plugin.CheckFailed`): both runs give every request the same
codes. ``--quick``: C = 8 only, 8 frames.
"""

from __future__ import annotations

import time
from typing import Any

from omni_core.plugin import CheckFailed, Row

BENCH = "qwen3-omni-talker"
LEVELS = (8, 16)
ROUNDS = 2
USER_TOKENS, REPLY_TOKENS = 8, 6


def prompts(engine: Any, count: int) -> list[dict[str, Any]]:
    """``count`` bridge dicts (the whole thinker output at once) of different lengths."""
    import torch

    width = engine.talker.text_projection.linear_fc1.in_features
    out = []
    for n in range(count):
        user = [100 + (n * 7 + i) % 50 for i in range(USER_TOKENS + n % 5)]
        ids = [engine.im_start, engine.user, *user, engine.im_start, engine.assistant_id, 198]
        reply = [200 + (n + i) % 50 for i in range(REPLY_TOKENS)]
        rows = torch.randn(len(ids) + len(reply), width, generator=torch.Generator().manual_seed(n))
        out.append(
            {"prompt_ids": ids, "image_sizes": [], "start": 0, "token_ids": reply}
            | {"embeddings": rows, "hidden": rows}
        )
    return out


def run(engine: Any, parts: list[dict[str, Any]], frames: int, batch: int) -> tuple[float, dict]:
    """Every request added at once, stepped to the end with ``batch``: seconds and codes."""
    from types import SimpleNamespace

    from omni_core import SamplingParams

    params = SamplingParams(temperature=0.0, repetition_penalty=1.05, max_tokens=frames)
    engine.batch = batch
    codes: dict[str, list[int]] = {}
    started = time.perf_counter()
    for n, prompt in enumerate(parts):
        rid = f"b{batch}-{n}"
        engine.add(
            SimpleNamespace(
                request_id=rid,
                prompt=prompt,
                params=params,
                streaming_input=False,
                stream_outputs=False,
            )
        )
        codes[rid] = []
    left = set(codes)
    while left:
        for out in engine.step():
            if out.error is not None:
                raise CheckFailed(f"{BENCH}: request {out.request_id} failed: {out.error}")
            codes[out.request_id] += out.token_ids
            if out.finished:
                left.discard(out.request_id)
    return time.perf_counter() - started, {k.split("-")[1]: v for k, v in codes.items()}


def measure(engine: Any, levels: tuple[int, ...], frames: int) -> list[Row]:
    """The rows of each level: unbatched (``max_batch`` 1) then batched, the same requests."""
    batched = engine.batch
    out: list[Row] = []
    try:
        for c in levels:
            parts = prompts(engine, c)
            got: dict[int, tuple[float, dict[str, list[int]], int]] = {}
            for _ in range(ROUNDS):
                for batch in (1, batched):
                    before = engine.forwards["talker"]
                    seconds, codes = run(engine, parts, frames, batch)
                    if batch in got:
                        seconds = min(seconds, got[batch][0])
                    got[batch] = (seconds, codes, engine.forwards["talker"] - before)
            (s1, codes1, f1), (sb, codesb, fb) = got[1], got[batched]
            if codes1 != codesb:
                raise CheckFailed(f"{BENCH}: C={c}: batched codes differ from unbatched ones")
            total = sum(len(v) for v in codes1.values()) / engine.groups
            case = f"tiny, C={c}, {frames} frames max"
            for name, mine, base in (("unbatched", s1, None), ("batched", sb, s1)):
                out.append(
                    Row(
                        BENCH,
                        f"{case}, {name}",
                        "requests/s",
                        c / mine,
                        "req/s",
                        c / base if base else None,
                        "unbatched",
                    )
                )
                out.append(
                    Row(
                        BENCH,
                        f"{case}, {name}",
                        "frames/s",
                        total / mine,
                        "frames/s",
                        total / base if base else None,
                        "unbatched",
                    )
                )
            out.append(Row(BENCH, f"{case}, unbatched", "talker forwards", float(f1), "forwards"))
            out.append(Row(BENCH, f"{case}, batched", "talker forwards", float(fb), "forwards"))
    finally:
        engine.batch = batched
    return out


def bench_talker(quick: bool, levels: tuple[int, ...] | None = None, frames: int = 0) -> list[Row]:
    """The rows of ``omni bench qwen3-omni-talker`` (``levels``/``frames``: from Python)."""
    import torch

    from omni_core import OmniSettings
    from omni_core.extend import resolve_model
    from omni_core.plugin import PluginHost
    from omni_qwen3.talker import build

    path = resolve_model("tiny-qwen3-omni", PluginHost.create(OmniSettings()))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the talker's stage process runs it
    try:
        engine = build({"model": str(path), "threads": 1, "options": {}})
        measure(engine, (2,), 2)  # warm-up
        levels = levels or ((8,) if quick else LEVELS)
        return measure(engine, levels, frames or (8 if quick else 32))
    finally:
        torch.set_num_threads(threads)
