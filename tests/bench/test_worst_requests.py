"""examples/worst_requests.py: its legal requests sit within the budgets, its attacks past them, and
it reads the memory of a whole process tree (the measurement itself needs a real server)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from omni_core.chat_media import MediaBudget, decode_audio, decode_image
from omni_core.config.settings import OmniSettings
from omni_core.errors import RequestError

SCRIPT = Path(__file__).parents[2] / "examples" / "worst_requests.py"


@pytest.fixture(scope="module")
def worst() -> Any:
    spec = importlib.util.spec_from_file_location("worst_requests", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_legal_requests_are_at_the_budgets_and_attacks_past_them(worst: Any) -> None:
    settings = OmniSettings(
        max_audio_seconds=3,
        max_image_pixels=300 * 300,
        max_prompt_chars=1000,
        max_body_bytes=1 << 24,
    )
    budget = MediaBudget.from_settings(settings)
    cases = dict(worst.cases(settings))
    assert all(len(json.dumps(body)) < settings.max_body_bytes for body in cases.values())

    def part(name: str) -> Any:
        return next(c for c in cases[name]["messages"][0]["content"] if c["type"] != "text")

    audio = part("audio 3 s at 8 kHz")["input_audio"]["data"]
    samples = decode_audio(audio, "wav", 16000, "p", budget)
    assert len(samples) == 3 * 16000  # resampled from 8 kHz: the whole budget, legal
    assert decode_image(part("image 300x300 RGB PNG")["image_url"]["url"], "p", budget).size == (
        300,
        300,
    )
    prompt = cases["prompt 1,000 chars"]["messages"][0]["content"][0]["text"]
    assert len(prompt) == settings.max_prompt_chars
    with pytest.raises(RequestError, match="1 Hz"):
        decode_audio(part("illegal: 1 Hz WAV")["input_audio"]["data"], "wav", 16000, "p", budget)
    with pytest.raises(RequestError, match="9000x9000"):
        decode_image(part("illegal: 9000x9000 PNG")["image_url"]["url"], "p", budget)
    assert len(cases["illegal: 15 MiB prompt"]["messages"][0]["content"][0]["text"]) == 15 << 20


def test_the_body_limit_caps_the_audio_seconds(worst: Any) -> None:
    settings = OmniSettings(max_audio_seconds=600, max_body_bytes=1 << 20)
    ((name, body),) = [(n, b) for n, b in worst.cases(settings) if n.startswith("audio")]
    assert name == "audio 48 s at 8 kHz"  # 1 MiB of base64: 768 KiB, 48 s of 16-bit 8 kHz audio
    slack = settings.max_body_bytes - len(json.dumps(body))
    assert 0 < slack < 4096 + 16000 * 4 / 3  # the JSON's room and less than one more second


def test_memory_reads_each_process_of_the_tree(worst: Any) -> None:
    grow = "b = bytearray(64 << 20); import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", grow])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if (
                child.pid in worst.tree(os.getpid())
                and worst.memory([child.pid]).get(child.pid, (0, 0))[0] > 64 << 20
            ):
                break
            time.sleep(0.05)
        found = worst.memory(worst.tree(os.getpid()))
        rss, hwm = found[child.pid]
        assert rss > 64 << 20 and hwm >= rss and os.getpid() in found
        assert worst.label(os.getpid(), os.getpid()) == "server"
    finally:
        child.kill()
        child.wait()
