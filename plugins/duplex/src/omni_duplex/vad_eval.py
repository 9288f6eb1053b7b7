"""How well a server VAD tells speech from noise and music: the figures behind the default VAD.

* **false barge-ins**: synthesised non-speech sounds (white/pink/brown noise bursts, a door slam,
  knocks, claps, a piano chord, a melody, an organ chord, a drum beat, a siren, a band playing)
  at *speech level* (their loud part has the RMS of the speech clips' loud part), each between
  quiet stretches; a clip counts when the VAD reports ``speech_started`` anywhere in it.
* **speech detected**: each speech clip alone and over noise or music 10 dB below it; a trial
  counts when a stretch the VAD reports as speech overlaps the speech.
* **cost per 20 ms chunk**: the time ``feed`` takes for one 20 ms chunk (all chunks of all clips).

Audio is fed at 16 kHz in 20 ms chunks with the session defaults (``min_speech_duration_ms``
100, ``silence_duration_ms`` 500, the VAD's default threshold). Speech comes from WAV clips
(``omni_duplex/speech/speech_*.wav``, made with espeak-ng by ``scripts/make_speech.py``);
everything else is generated here from a seed, so a run is reproducible.

    python -m omni_duplex.vad_eval [CLIP_DIR]
"""

from __future__ import annotations

import logging
import sys
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omni_duplex.vad import make_vad

logger = logging.getLogger(__name__)

RATE = 16_000
CHUNK = RATE // 50  # 20 ms
SEEDS = 6  # variants of each non-speech sound
SNR_DB = 10.0  # background under speech in the speech trials
GAP_S = 0.3  # quiet before and after each non-speech sound
LEAD_S = 0.4  # background before and after the speech in a speech trial
CLIP_DIR = Path(__file__).resolve().parent / "speech"  # made by scripts/make_speech.py

Sound = Callable[[np.random.Generator], Any]


def _t(seconds: float) -> Any:
    return np.arange(int(RATE * seconds)) / RATE


def _fade(x: Any, ms: float = 10.0) -> Any:
    n = min(x.size // 2, int(RATE * ms / 1000))
    ramp = np.linspace(0.0, 1.0, n)
    x = x.copy()
    x[:n] *= ramp
    x[x.size - n :] *= ramp[::-1]
    return x


def _colored(rng: np.random.Generator, seconds: float, exponent: float) -> Any:
    """Noise with power ∝ 1/f^exponent (0 white, 1 pink, 2 brown), above 20 Hz."""
    n = int(RATE * seconds)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / RATE)
    spectrum[f < 20] = 0
    spectrum[f >= 20] /= f[f >= 20] ** (exponent / 2)
    return np.fft.irfft(spectrum, n)


def _lowpass(x: Any, width: int) -> Any:
    return np.convolve(x, np.ones(width) / width, mode="same")


def _harmonic(freq: Any, seconds: float, harmonics: int = 6, vibrato: float = 0.0) -> Any:
    """A harmonic tone (amplitude 1/k for harmonic k); ``freq`` may vary per sample."""
    f = np.asarray(freq, dtype=float)
    t = np.arange(f.size) / RATE if f.ndim else _t(seconds)
    f = np.broadcast_to(f, t.shape)
    if vibrato:
        f = f * (1 + vibrato * np.sin(2 * np.pi * 5.5 * t))
    phase = 2 * np.pi * np.cumsum(f) / RATE
    return sum(np.sin(k * phase) / k for k in range(1, harmonics + 1))


def _decay(seconds: float, tau: float) -> Any:
    return np.exp(-_t(seconds) / tau)


def white_burst(rng: np.random.Generator) -> Any:
    return _fade(rng.standard_normal(int(RATE * rng.uniform(0.4, 1.0))))


def pink_burst(rng: np.random.Generator) -> Any:
    return _fade(_colored(rng, rng.uniform(0.4, 1.0), 1.0))


def brown_rumble(rng: np.random.Generator) -> Any:
    return _fade(_colored(rng, rng.uniform(0.6, 1.2), 2.0), 40)


def door_slam(rng: np.random.Generator) -> Any:
    s = 0.7
    thump = np.sin(2 * np.pi * rng.uniform(45, 90) * _t(s)) * _decay(s, 0.08)
    crack = _lowpass(rng.standard_normal(int(RATE * s)), 4) * _decay(s, 0.025)
    rattle = np.zeros(int(RATE * s))
    for _ in range(3):
        at = int(RATE * rng.uniform(0.08, 0.4))
        n = int(RATE * 0.05)
        rattle[at : at + n] += 0.3 * rng.standard_normal(n) * _decay(0.05, 0.01)[:n]
    return thump + crack + rattle


def knocks(rng: np.random.Generator) -> Any:
    out = np.zeros(int(RATE * 0.9))
    for i in range(3):
        at = int(RATE * (0.05 + i * rng.uniform(0.18, 0.25)))
        hit = np.sin(2 * np.pi * rng.uniform(180, 380) * _t(0.12)) * _decay(0.12, 0.02)
        hit[:40] += rng.standard_normal(40)
        out[at : at + hit.size] += hit[: out.size - at]
    return out


def claps(rng: np.random.Generator) -> Any:
    out = np.zeros(int(RATE * 1.0))
    for i in range(int(rng.integers(2, 5))):
        at = int(RATE * (0.05 + i * 0.22))
        noise = rng.standard_normal(int(RATE * 0.08))
        band = _lowpass(noise, 3) - _lowpass(noise, 12)  # roughly 1-5 kHz
        out[at : at + band.size] += band * _decay(0.08, 0.012)
    return out


def _note(midi: float) -> float:
    return float(440.0 * 2 ** ((midi - 69) / 12))


def piano_chord(rng: np.random.Generator) -> Any:
    root = int(rng.integers(45, 64))
    shape = [0, 4, 7, 12] if rng.random() < 0.5 else [0, 3, 7, 10]
    tone = sum(_harmonic(_note(root + k), 1.2, 8) for k in shape)
    return _fade(tone * _decay(1.2, 0.45), 3)


def melody(rng: np.random.Generator) -> Any:
    notes = 57 + rng.choice([0, 2, 4, 5, 7, 9, 11, 12], size=int(rng.integers(6, 9)))
    lengths = rng.uniform(0.12, 0.25, size=notes.size)
    pairs = zip(notes, lengths, strict=True)
    freq = np.concatenate([np.full(int(RATE * s), _note(m)) for m, s in pairs])
    env = np.concatenate([_fade(np.ones(int(RATE * s)), 15) for s in lengths])
    return _harmonic(freq, freq.size / RATE, 8, vibrato=0.006) * env


def organ(rng: np.random.Generator) -> Any:
    root = int(rng.integers(48, 60))
    tone = sum(_harmonic(_note(root + k), 1.2, 4) for k in (0, 4, 7))
    return _fade(tone * (1 + 0.2 * np.sin(2 * np.pi * 6 * _t(1.2))), 30)


def drums(rng: np.random.Generator) -> Any:
    beat = 60 / rng.uniform(100, 140) / 2  # eighth notes
    out = np.zeros(int(RATE * 1.6))
    kick_f = np.linspace(120, 45, int(RATE * 0.15))
    kick = np.sin(2 * np.pi * np.cumsum(kick_f) / RATE) * _decay(0.15, 0.05)
    snare = (0.6 * rng.standard_normal(int(RATE * 0.12)) + np.sin(2 * np.pi * 185 * _t(0.12))) * (
        _decay(0.12, 0.03)
    )
    hat_noise = rng.standard_normal(int(RATE * 0.04))
    hat = 0.3 * (hat_noise - _lowpass(hat_noise, 3)) * _decay(0.04, 0.008)
    for i in range(int(1.5 / beat)):
        at = int(RATE * i * beat)
        for hit in (hat, kick if i % 4 == 0 else None, snare if i % 4 == 2 else None):
            if hit is not None:
                end = min(out.size, at + hit.size)
                out[at:end] += hit[: end - at]
    return out


def siren(rng: np.random.Generator) -> Any:
    t = _t(1.5)
    f = rng.uniform(600, 800) + 400 * (0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.8, 2) * t))
    return _fade(_harmonic(f, 1.5, 3), 30)


def band(rng: np.random.Generator) -> Any:
    parts = [drums(rng), melody(rng), piano_chord(rng)]
    n = min(p.size for p in parts)
    return _fade(sum(p[:n] / level(p[:n]) for p in parts), 20)


SOUNDS: dict[str, Sound] = {
    "white noise": white_burst,
    "pink noise": pink_burst,
    "brown noise": brown_rumble,
    "door slam": door_slam,
    "knocks": knocks,
    "claps": claps,
    "piano chord": piano_chord,
    "melody": melody,
    "organ chord": organ,
    "drums": drums,
    "siren": siren,
    "band": band,
}
BACKGROUNDS = ("white noise", "pink noise", "melody", "drums", "band")


def sound(name: str, rng: np.random.Generator, at_level: float) -> Any:
    """A fresh variant of the non-speech sound ``name`` whose loud part has RMS ``at_level``."""
    x = SOUNDS[name](rng)
    return x * (at_level / level(x))


def speech_level(speech: list[Any]) -> float:
    """The level non-speech sounds are played at: the speech clips' median :func:`level`."""
    return float(np.median([level(s) for s in speech]))


def level(x: Any) -> float:
    """RMS of the loud part: 20 ms frames within 20 dB of the loudest frame."""
    n = x.size // CHUNK
    frames = np.sqrt(np.mean(np.asarray(x[: n * CHUNK]).reshape(n, CHUNK) ** 2, axis=1))
    loud = frames[frames >= 0.1 * frames.max()]
    return float(np.sqrt(np.mean(loud**2)))


def load_speech(directory: Path = CLIP_DIR, pattern: str = "speech_*.wav") -> list[Any]:
    """The clips of ``directory`` matching ``pattern`` (16 kHz mono pcm16) as float32 arrays."""
    clips = []
    for path in sorted(Path(directory).glob(pattern)):
        with wave.open(str(path)) as w:
            if w.getframerate() != RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise ValueError(f"{path}: need 16 kHz mono pcm16")
            pcm = w.readframes(w.getnframes())
        clips.append(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0)
    return clips


@dataclass
class Trial:
    name: str
    audio: Any
    speech: tuple[float, float] | None  # (onset, offset) in seconds; None: no speech in it


def trials(speech: list[Any], seed: int = 0) -> list[Trial]:
    """Non-speech clips at speech level, then speech trials (clean and over backgrounds)."""
    rng = np.random.default_rng(seed)
    loud = speech_level(speech)
    floor = 1e-4  # a quiet room, not digital silence
    out = []
    for name in SOUNDS:
        for i in range(SEEDS):
            x = sound(name, rng, loud)
            gap = np.zeros(int(RATE * GAP_S))
            audio = np.concatenate([gap, x, gap])
            audio = audio + floor * rng.standard_normal(audio.size)
            out.append(Trial(f"{name} #{i}", audio, None))
    for k, clip in enumerate(speech):
        lead = np.zeros(int(RATE * LEAD_S))
        voice = np.concatenate([lead, clip, lead])
        onset, offset = LEAD_S, LEAD_S + clip.size / RATE
        for background in (None, *BACKGROUNDS):
            audio = voice + floor * rng.standard_normal(voice.size)
            if background is not None:
                noise = np.concatenate([SOUNDS[background](rng) for _ in range(4)])
                while noise.size < voice.size:
                    noise = np.concatenate([noise, noise])
                noise = noise[: voice.size] * (level(clip) / level(noise) / 10 ** (SNR_DB / 20))
                audio = audio + noise
            out.append(Trial(f"speech {k} + {background or 'quiet'}", audio, (onset, offset)))
    return out


@dataclass
class Score:
    vad: str
    noise_clips: int = 0
    false_triggers: int = 0
    speech_trials: int = 0
    detected: int = 0
    chunk_s: list[float] = field(default_factory=list)  # feed time per 20 ms chunk
    missed: list[str] = field(default_factory=list)
    triggered: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)  # speech trials: triggered by the background

    @property
    def false_rate(self) -> float:
        return self.false_triggers / max(1, self.noise_clips)

    @property
    def detect_rate(self) -> float:
        return self.detected / max(1, self.speech_trials)

    def chunk_us(self, q: float) -> float:
        ordered = sorted(self.chunk_s)
        return 1e6 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def segments(vad: Any, audio: Any, timings: list[float]) -> list[tuple[float, float]]:
    """(start, stop) in seconds of each stretch ``vad`` reported as speech, feeding ``audio`` in
    20 ms chunks (a stretch still open at the end stops there); appends each feed's time."""
    out: list[tuple[float, float]] = []
    samples = np.asarray(audio, dtype=np.float32)
    start = None
    for offset in range(0, samples.size, CHUNK):
        began = time.perf_counter()
        events = vad.feed(samples[offset : offset + CHUNK])
        timings.append(time.perf_counter() - began)
        for event in events:
            if event.kind == "started":
                start = event.audio_ms / 1000
            elif start is not None:
                out.append((start, event.audio_ms / 1000))
                start = None
    if start is not None:
        out.append((start, samples.size / RATE))
    return out


def score(kind: str, clips: list[Trial], **vad_options: Any) -> Score:
    options = {"min_speech_duration_ms": 100, "silence_duration_ms": 500, **vad_options}
    result = Score(kind)
    for trial in clips:
        found = segments(make_vad(kind, RATE, **options), trial.audio, result.chunk_s)
        if trial.speech is None:
            result.noise_clips += 1
            if found:
                result.false_triggers += 1
                result.triggered.append(trial.name)
        else:
            result.speech_trials += 1
            onset, offset = trial.speech
            if any(start < onset - 0.1 for start, _ in found):
                result.early.append(trial.name)
            if any(start <= offset and stop >= onset for start, stop in found):
                result.detected += 1
            else:
                result.missed.append(trial.name)
    return result


def _by_sound(names: list[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        sound = name.split(" #")[0]
        counts[sound] = counts.get(sound, 0) + 1
    return ", ".join(f"{sound} {n}/{SEEDS}" for sound, n in counts.items())


def report(scores: list[Score]) -> str:
    lines = [
        f"{'vad':8} {'false barge-ins':>22} {'speech detected':>20} {'µs/20 ms chunk p50/p99':>24}"
    ]
    for s in scores:
        lines.append(
            f"{s.vad:8} {s.false_triggers:>4}/{s.noise_clips:<4} ({100 * s.false_rate:5.1f} %)"
            f" {s.detected:>4}/{s.speech_trials:<4} ({100 * s.detect_rate:5.1f} %)"
            f" {s.chunk_us(0.5):>12.0f} / {s.chunk_us(0.99):<8.0f}"
        )
        if s.triggered:
            lines.append(f"  false barge-ins on: {_by_sound(s.triggered)}")
        if s.early:
            lines.append(f"  speech trials whose background triggered first: {len(s.early)}")
        if s.missed:
            lines.append(f"  missed: {', '.join(s.missed)}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else CLIP_DIR
    speech = load_speech(directory)
    if not speech:
        print(f"no speech_*.wav clips in {directory}", file=sys.stderr)
        return 2
    clips = trials(speech)
    print(report([score(kind, clips) for kind in ("silero", "energy")]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
