"""``omni bench qwen3-tts-talker``'s measurement: batched and unbatched runs give every request
the same codes (its check), and batching takes fewer talker forwards than one per request."""

from __future__ import annotations


def test_the_talker_bench_compares_batched_with_unbatched(tiny_tts):
    from omni_qwen3_tts.bench import measure
    from omni_qwen3_tts.talker import build

    engine = build({"model": str(tiny_tts), "threads": 1, "options": {}})
    rows = {row.figure: row for row in measure(engine, (4,), 4)}
    assert set(rows) == {"requests/s", "frames/s", "talker forwards"}
    forwards = rows["talker forwards"]
    assert forwards.baseline == 16 and forwards.value < forwards.baseline  # 4 x 4 unbatched
    assert rows["requests/s"].baseline_name == "unbatched" and rows["requests/s"].value > 0


def test_the_speech_bench_measures_streamed_against_whole(tiny_tts, built_model):
    """Its check (same audio length both ways) passes; every figure is there; the streamed first
    audio precedes the whole one (4-frame chunks of 12 frames: an order, by construction)."""
    from omni_qwen3_tts.pipelines import tts_pipeline
    from omni_qwen3_tts.tts_bench import measure

    from omni_core import AsyncOmniEngine, OmniSettings

    settings = OmniSettings(cache_dir=built_model.cache, startup_timeout_s=600.0)
    engine = AsyncOmniEngine(tts_pipeline(), settings=settings)
    try:
        rows = {(r.case, r.figure): r for r in measure(engine, (2,), 12)}
    finally:
        engine.shutdown()
    assert {figure for _, figure in rows} >= {"TTFP p50 streamed", "RTF p99 streamed",
                                              "underruns p50 streamed", "audio (mean)"}  # fmt: skip
    ttfp = rows[("C=2", "TTFP p50 streamed")]
    assert ttfp.baseline_name == "whole" and 0 < ttfp.value < ttfp.baseline
    assert 0 < rows[("C=2", "audio (mean)")].value <= 12 * 0.08 + 1e-9
