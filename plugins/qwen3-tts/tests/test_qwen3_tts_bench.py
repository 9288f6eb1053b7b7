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
