"""``omni run qwen3-tts`` writes a WAV of whole 12.5 Hz frames, as the audio is decoded, and
prints the time to first audio; an unknown voice is exit 2 naming the voices."""

from __future__ import annotations

import os
import subprocess
import sys
import wave

import pytest

pytestmark = pytest.mark.timeout(300)


def omni(cache, *args):
    env = {**os.environ, "OMNI_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "omni_core.cli", "run", "qwen3-tts", "--raw", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)


def test_omni_run_writes_a_wav(tiny_tts, built_model, tmp_path):
    done = omni(built_model.cache, "-p", "hello world", "--voice", "ryan", "--seed", "1",
                "--max-tokens", "24", "--output-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "time to first audio" in done.stdout
    (path,) = tmp_path.glob("*.wav")
    with wave.open(str(path)) as wav:
        assert wav.getframerate() == 24000
        frames = wav.getnframes()
    assert 0 < frames <= 24 * 1920 and frames % 1920 == 0


def test_an_unknown_voice_is_exit_2_naming_the_voices(tiny_tts, built_model, tmp_path):
    done = omni(built_model.cache, "-p", "hello", "--voice", "nobody",
                "--output-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 2
    assert "aiden, dylan, ryan, vivian" in done.stderr + done.stdout
