"""Energy-based voice-activity detection, clocked by the audio itself (no timers).

The audio is cut into 20 ms frames; a frame whose RMS reaches ``threshold`` is speech. Speech
starts after ``min_speech_duration_ms`` of consecutive speech frames (timestamped at the first of
them) and stops after ``silence_duration_ms`` of consecutive non-speech frames (timestamped at the
first silent frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

FRAME_MS = 20


@dataclass(frozen=True, slots=True)
class VadEvent:
    kind: str  # "started" | "stopped"
    audio_ms: int  # position in the session's input audio


class EnergyVad:
    def __init__(
        self,
        rate: int,
        *,
        threshold: float,
        min_speech_duration_ms: int,
        silence_duration_ms: int,
        start_ms: int = 0,
    ) -> None:
        self.rate = rate
        self.start_ms = start_ms
        self.threshold = threshold
        self.frame = max(1, rate * FRAME_MS // 1000)
        self.min_speech = max(1, -(-min_speech_duration_ms // FRAME_MS))
        self.min_silence = max(1, -(-silence_duration_ms // FRAME_MS))
        self.speaking = False
        self._rest: Any = np.zeros(0, dtype=np.float32)
        self._frames = 0  # frames consumed so far
        self._run = 0  # length of the current run that may flip the state
        self._run_start = 0

    def feed(self, samples: Any) -> list[VadEvent]:
        data = np.concatenate([self._rest, np.asarray(samples, dtype=np.float32)])
        n = data.size // self.frame
        self._rest = data[n * self.frame :]
        if n == 0:
            return []
        frames = data[: n * self.frame].reshape(n, self.frame)
        loud = np.sqrt(np.mean(frames * frames, axis=1)) >= self.threshold
        events: list[VadEvent] = []
        for is_speech in loud.tolist():
            flips = is_speech != self.speaking
            if flips:
                if self._run == 0:
                    self._run_start = self._frames
                self._run += 1
                needed = self.min_silence if self.speaking else self.min_speech
                if self._run >= needed:
                    self.speaking = not self.speaking
                    kind = "started" if self.speaking else "stopped"
                    events.append(VadEvent(kind, self.start_ms + self._run_start * FRAME_MS))
                    self._run = 0
            else:
                self._run = 0
            self._frames += 1
        return events

    def reset(self) -> None:
        self.speaking = False
        self._run = 0
        self._rest = np.zeros(0, dtype=np.float32)
