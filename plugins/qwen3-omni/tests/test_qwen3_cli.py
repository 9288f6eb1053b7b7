"""``omni run qwen3-omni --prompt ... --audio in.wav`` as a user runs it: a subprocess with a
fresh cache (the tiny checkpoint built on first use), text on stdout, a 24 kHz WAV written."""

from __future__ import annotations

import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from qwen_prompts import SAMPLE_RATE, sine

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]


def test_omni_run_qwen3_omni_prints_text_and_writes_a_24khz_wav(tmp_path):
    clip = tmp_path / "in.wav"
    with wave.open(str(clip), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes((sine() * 32767).astype(np.int16).tobytes())
    out_dir, cache = tmp_path / "out", tmp_path / "cache"
    omni = Path(sys.executable).with_name("omni")
    env = {**os.environ, "OMNI_CACHE_DIR": str(cache)}
    args = ["run", "qwen3-omni", "--prompt", "What do you hear?", "--audio", str(clip)]
    run = subprocess.run(
        [str(omni), *args, "-o", str(out_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=850,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (cache / "models" / "tiny-qwen3-omni-v1").is_dir()  # built from nothing
    assert run.stdout.strip(), run.stderr[-3000:]
    (written,) = sorted(out_dir.glob("*.wav"))
    assert str(written.name) in run.stdout + run.stderr
    with wave.open(str(written)) as f:
        assert f.getframerate() == 24000 and f.getnchannels() == 1
        frames = f.getnframes()
    assert frames > 0 and (frames + 555) % 1920 == 0  # whole 80 ms code frames
