"""Property-based fuzz of the chat media parsers (issue 24): WAV headers, PNG/JPEG/GIF/BMP headers
and data URLs. Every input yields a decoded value within the budget or exactly one RequestError
naming the part (400, or 413 over a size budget), and no input makes the process's resident set
grow by more than GROWTH while it is decoded (peak RSS, reset before each input through
/proc/self/clear_refs; tracemalloc's peak where that file is not writable).

A short run is part of the suite; a long one: ``OMNI_MEDIA_FUZZ_EXAMPLES=2000
OMNI_MEDIA_FUZZ_REPORT=figures.json pytest tests/test_media_fuzz.py`` (docs/security.md has its
figures)."""

from __future__ import annotations

import io
import json
import os
import re
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from omni_core.chat_media import EXTENSIBLE_TAG, MediaBudget, decode_audio, decode_image
from omni_core.errors import RequestError
from omni_core.testing.tiers import examples
from tests.media_kit import b64, blank_png, chunk, data_url, fmt_chunk, png, riff

BUDGET = MediaBudget(audio_seconds=30.0, audio_bytes=4 << 20, image_pixels=1 << 20, file_bytes=0)
GROWTH = 48 << 20  # bytes of resident set one input may add while decoded (budgets: ~25 MB)
EXAMPLES = int(os.environ.get("OMNI_MEDIA_FUZZ_EXAMPLES", "60"))
WHERE = "messages[0].content[0]"
FUZZ = settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
STATS: dict[str, dict[str, Any]] = {}
CLEAR_REFS = Path("/proc/self/clear_refs")


def _hwm_works() -> bool:
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


PEAK_RSS = _hwm_works()


def _status(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    assert found, field
    return int(found.group(1)) * 1024


def measured(call: Callable[[], Any]) -> tuple[int, Any]:
    """(bytes the call added at its peak, its value or the RequestError it raised)."""
    if PEAK_RSS:
        CLEAR_REFS.write_text("5")  # VmHWM := the current RSS
        before = _status("VmRSS")
    else:
        tracemalloc.start()
    try:
        outcome: Any = call()
    except RequestError as exc:
        outcome = exc
    finally:
        if PEAK_RSS:
            growth = _status("VmHWM") - before
        else:
            growth = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return growth, outcome


def record(kind: str, growth: int, outcome: Any) -> None:
    stats = STATS.setdefault(kind, {"examples": 0, "refused": 0, "max_growth_bytes": 0})
    stats["examples"] += 1
    stats["refused"] += isinstance(outcome, RequestError)
    stats["max_growth_bytes"] = max(stats["max_growth_bytes"], growth)
    assert growth <= GROWTH, f"{kind}: decoding one input added {growth >> 20} MiB"
    if isinstance(outcome, RequestError):
        assert outcome.param == WHERE and str(outcome).startswith(f"{WHERE}: "), outcome
        assert outcome.status_code in (400, 413), outcome


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    target = os.environ.get("OMNI_MEDIA_FUZZ_REPORT")
    if target:
        figures = {"peak_rss_measured": PEAK_RSS, "growth_bound_bytes": GROWTH, "kinds": STATS}
        Path(target).write_text(json.dumps(figures, indent=2))


def mutated(draw: Any, raw: bytes) -> bytes:
    """``raw``, maybe cut short or with a few bytes overwritten."""
    how = draw(st.sampled_from(["keep"] * 6 + ["cut", "poke"]))
    if how == "cut":
        return raw[: draw(st.integers(0, len(raw)))]
    if how == "poke" and raw:
        out = bytearray(raw)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    return raw


def u16(*likely: int) -> Any:
    return st.sampled_from(likely) | st.integers(0, 0xFFFF)


@st.composite
def wavs(draw: Any) -> bytes:
    if draw(st.sampled_from([True, True, True, False])):  # a plausible header: most decode
        tag, bits = draw(st.sampled_from([(1, 8), (1, 16), (1, 32), (3, 32), (3, 64), (1, 24)]))
        sub, tag = tag, draw(st.sampled_from([tag, EXTENSIBLE_TAG]))
        channels = draw(st.integers(1, 17))
        rate = draw(st.sampled_from([1, 7999, 8000, 16000, 22050, 44100, 48000, 192000]))
        align = channels * bits // 8
    else:
        tag, sub = draw(u16(1, 3, EXTENSIBLE_TAG, 2)), draw(u16(1, 3))
        channels, bits = draw(u16(1, 2, 16, 17, 0)), draw(u16(8, 16, 24, 32, 64, 0))
        rate = draw(st.sampled_from([1, 7999, 192001]) | st.integers(0, 2**32 - 1))
        align = draw(st.just((channels * bits // 8) & 0xFFFF) | st.integers(0, 0xFFFF))
    fmt = fmt_chunk(tag, channels, rate, bits, sub=sub, align=align)
    data = draw(st.binary(max_size=4096) | st.builds(lambda n: b"\0" * n, st.integers(0, 1 << 18)))
    before = draw(st.sampled_from([b"", chunk(b"LIST", b"INFOjunk!"), chunk(b"fact", b"\0" * 4)]))
    size = draw(st.sampled_from([None, None, None, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1))
    return mutated(draw, riff(fmt, data, before=before, data_size=size))


@FUZZ
@given(raw=wavs() | st.binary(max_size=256), rate=st.sampled_from([16000, 24000, 8000, 192000]))
def test_any_wav_decodes_within_budget_or_is_one_request_error(raw, rate):
    growth, outcome = measured(lambda: decode_audio(b64(raw), "wav", rate, WHERE, BUDGET))
    record("wav", growth, outcome)
    if not isinstance(outcome, RequestError):
        assert outcome.dtype == np.float32 and outcome.ndim == 1 and outcome.size
        assert outcome.size * 4 <= BUDGET.audio_bytes
        assert np.isfinite(outcome).all() and np.abs(outcome).max() <= 1.0


def _tiny(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(out, format=fmt)
    return out.getvalue()


TINY = {fmt: _tiny(fmt) for fmt in ("JPEG", "GIF", "BMP")}
SIDE = st.sampled_from([1, 1024, 1025, 9000, 65535]) | st.integers(1, 70000)


def resized(fmt: str, width: int, height: int) -> bytes:
    """A tiny real image whose header now declares ``width`` x ``height``."""
    raw = bytearray(TINY[fmt])
    if fmt == "JPEG":  # SOF0: FFC0, length, precision, height, width
        at = raw.index(b"\xff\xc0") + 5
        raw[at : at + 4] = struct.pack(">HH", height & 0xFFFF, width & 0xFFFF)
    elif fmt == "GIF":  # logical screen, then the first image descriptor
        raw[6:10] = struct.pack("<HH", width & 0xFFFF, height & 0xFFFF)
        at = raw.index(b"\x2c") + 5
        raw[at : at + 4] = struct.pack("<HH", width & 0xFFFF, height & 0xFFFF)
    else:  # BMP: BITMAPINFOHEADER width, height
        raw[18:26] = struct.pack("<ii", width, height)
    return bytes(raw)


@st.composite
def images(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["png", "png-header", "JPEG", "GIF", "BMP", "bytes"]))
    width, height = draw(SIDE), draw(SIDE)
    if kind == "png":  # complete pixel data: a decompression bomb when large
        raw = blank_png(min(width, 4096), min(height, 4096))
    elif kind == "png-header":
        depth, color = draw(st.sampled_from([1, 8, 16])), draw(st.sampled_from([0, 2, 3, 4, 6]))
        idat = draw(st.binary(max_size=64) | st.just(zlib.compress(b"\0" * 4096)))
        raw = png(width, height, idat, depth=depth, color=color)
    elif kind == "bytes":
        raw = draw(st.binary(max_size=512))
    else:
        raw = resized(kind, width, height)
    return mutated(draw, raw)


@FUZZ
@given(raw=images())
def test_any_image_decodes_within_budget_or_is_one_request_error(raw):
    growth, outcome = measured(lambda: decode_image(data_url(raw), WHERE, BUDGET))
    record("image", growth, outcome)
    if not isinstance(outcome, RequestError):
        width, height = outcome.size
        assert outcome.mode == "RGB" and width * height <= BUDGET.image_pixels


PREFIXES = ["data:image/png;base64,", "data:image/jpeg;base64,", "data:image/png,", "data:,"]
PREFIXES += ["data:text/plain;base64,", "https://example.invalid/x.png", "", "data:image/x;base64"]


@FUZZ
@given(
    head=st.sampled_from(PREFIXES) | st.text(max_size=40),
    body=st.sampled_from([b64(TINY["JPEG"]), b64(TINY["GIF"]), "@@", "aGk=", b64(b"\0" * 99)])
    | st.text(max_size=200),
)
def test_any_data_url_decodes_or_is_one_request_error(head, body):
    growth, outcome = measured(lambda: decode_image(head + body, WHERE, BUDGET))
    record("data-url", growth, outcome)
    if not isinstance(outcome, RequestError):
        assert outcome.mode == "RGB"
