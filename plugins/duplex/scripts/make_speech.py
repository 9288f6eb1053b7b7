"""Regenerates omni-duplex's speech clips (``src/omni_duplex/speech/``, used by the VAD tests,
``omni bench duplex`` and ``python -m omni_duplex.vad_eval``): short interruptions spoken by
espeak-ng, 16 kHz mono pcm16, leading/trailing silence trimmed, peak-normalised. Needs espeak-ng.

    .venv/bin/python plugins/duplex/scripts/make_speech.py

The clips are committed (about 8 s, under 300 KB) so nothing needs a speech synthesiser; the
noise and music they are mixed with are synthesised when used (omni_duplex.vad_eval).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np

from omni_duplex.audio import encode_pcm16, resample

RATE = 16_000
OUT = Path(__file__).resolve().parents[1] / "src" / "omni_duplex" / "speech"
# (file stem, espeak-ng voice, words per minute, text)
CLIPS = [
    ("speech_wait", "en-us", 180, "Wait, stop there."),
    ("speech_hold_on", "en+f3", 180, "Hold on a second."),
    ("speech_not_meant", "en-gb", 190, "No, not what I meant."),
    ("speech_question", "en-us+m3", 185, "Can I ask something?"),
    ("speech_interrupt", "en+f2", 185, "Sorry to interrupt."),
    ("speech_thanks", "en-gb+m7", 180, "Okay, thank you."),
    ("speech_what", "en-us+f4", 180, "Sorry, what?"),
    ("speech_louder", "en+m1", 185, "Speak up please."),
]


def synthesize(voice: str, wpm: int, text: str) -> np.ndarray:
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text],
        check=True,
        capture_output=True,
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    audio = resample(samples.astype(np.float32) / 32768.0, rate, RATE)
    loud = np.flatnonzero(np.abs(audio) > 0.02 * np.abs(audio).max())
    audio = audio[max(0, loud[0] - RATE // 50) : loud[-1] + RATE // 50]  # 20 ms margins
    return 0.7 * audio / np.abs(audio).max()


def main() -> int:
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is not installed", file=sys.stderr)
        return 1
    total = 0
    for stem, voice, wpm, text in CLIPS:
        pcm = encode_pcm16(synthesize(voice, wpm, text))
        path = OUT / f"{stem}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(pcm)
        total += path.stat().st_size
        print(f"{path.name}: {len(pcm) / 2 / RATE:.2f} s")
    print(f"total {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
