"""Server voice-activity detection, clocked by the audio itself (no timers).

Two detectors, chosen by ``turn_detection.vad``:

* ``silero`` (default): Silero VAD, a trained speech detector, from the ``silero-vad`` package's
  bundled ONNX model, run by ONNX Runtime on CPU. It scores 32 ms windows (512 samples at 16 kHz)
  with a speech probability; a window is speech when the probability reaches ``threshold``
  (default 0.5) and, once speech started, stays speech until it falls below ``threshold - 0.15``
  (hysteresis, as Silero's own iterator does). Noise, music and knocks score low: they do not
  barge in.
* ``energy`` (fallback): a 20 ms frame whose RMS reaches ``threshold`` (default 0.02) is speech.
  Any loud sound counts.

Both turn frame decisions into events the same way: speech starts after
``min_speech_duration_ms`` of consecutive speech frames (timestamped at the first of them) and
stops after ``silence_duration_ms`` of consecutive non-speech frames (timestamped at the first
silent frame).

The Silero model is loaded once per process (its file located without importing
``silero_vad``, whose Python API imports torch and sets torch's thread count process-wide); each
detector keeps its own recurrent state, so sessions share the model but not their state.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from omni_duplex.errors import DuplexError

logger = logging.getLogger(__name__)

VadKind = Literal["silero", "energy"]
VAD_KINDS: tuple[VadKind, ...] = ("silero", "energy")
FRAME_MS = 20  # energy VAD frame
SILERO_RATE = 16_000
SILERO_WINDOW = 512  # samples per scored window at 16 kHz (32 ms)
SILERO_CONTEXT = 64  # samples of the previous window the model sees in front of each window
SILERO_HYSTERESIS = 0.15
DEFAULT_THRESHOLD: dict[str, float] = {"silero": 0.5, "energy": 0.02}
_MISSING = (
    "turn_detection.vad 'silero' needs the packages of requirements/duplex-vad.txt "
    "(pip install --no-deps -r requirements/duplex-vad.txt: silero-vad for its model, "
    "onnxruntime to run it); or choose vad 'energy'"
)


@dataclass(frozen=True, slots=True)
class VadEvent:
    kind: str  # "started" | "stopped"
    audio_ms: int  # position in the session's input audio


class Vad(Protocol):
    @property
    def speaking(self) -> bool: ...

    def feed(self, samples: Any) -> list[VadEvent]: ...

    def reset(self) -> None: ...


class _Turns:
    """Per-frame speech decisions → ``started`` / ``stopped`` events (see the module doc)."""

    def __init__(
        self, frame_ms: float, min_speech_duration_ms: int, silence_duration_ms: int, start_ms: int
    ) -> None:
        self.frame_ms = frame_ms
        self.start_ms = start_ms
        self.min_speech = max(1, math.ceil(min_speech_duration_ms / frame_ms))
        self.min_silence = max(1, math.ceil(silence_duration_ms / frame_ms))
        self.speaking = False
        self._frames = 0  # frames decided so far
        self._run = 0  # length of the current run that may flip the state
        self._run_start = 0

    def step(self, is_speech: bool) -> VadEvent | None:
        event = None
        if is_speech != self.speaking:
            if self._run == 0:
                self._run_start = self._frames
            self._run += 1
            if self._run >= (self.min_silence if self.speaking else self.min_speech):
                self.speaking = not self.speaking
                kind = "started" if self.speaking else "stopped"
                event = VadEvent(kind, self.start_ms + round(self._run_start * self.frame_ms))
                self._run = 0
        else:
            self._run = 0
        self._frames += 1
        return event

    def reset(self) -> None:
        self.speaking = False
        self._run = 0


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
        self.threshold = threshold
        self.frame = max(1, rate * FRAME_MS // 1000)
        self._turns = _Turns(FRAME_MS, min_speech_duration_ms, silence_duration_ms, start_ms)
        self._rest: Any = np.zeros(0, dtype=np.float32)

    @property
    def speaking(self) -> bool:
        return self._turns.speaking

    def feed(self, samples: Any) -> list[VadEvent]:
        data = np.concatenate([self._rest, np.asarray(samples, dtype=np.float32)])
        n = data.size // self.frame
        self._rest = data[n * self.frame :]
        if n == 0:
            return []
        frames = data[: n * self.frame].reshape(n, self.frame)
        loud = np.sqrt(np.mean(frames * frames, axis=1)) >= self.threshold
        return [e for is_speech in loud.tolist() if (e := self._turns.step(is_speech))]

    def reset(self) -> None:
        self._turns.reset()
        self._rest = np.zeros(0, dtype=np.float32)


_model_lock = threading.Lock()
_model: Any = None


def silero_model_path() -> Path:
    """The ONNX model the ``silero-vad`` package ships (found without importing the package)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise DuplexError("vad_unavailable", _MISSING)
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise DuplexError("vad_unavailable", f"the silero-vad package has no model at {path}")
    return path


def silero_model() -> Any:
    """The process's ONNX Runtime session of Silero VAD (loaded on first use; thread-safe)."""
    global _model
    with _model_lock:
        if _model is None:
            path = silero_model_path()
            try:
                import onnxruntime as ort
            except ImportError:
                raise DuplexError("vad_unavailable", _MISSING) from None
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # one 32 ms window per call: threads only add cost
            options.inter_op_num_threads = 1
            started = time.perf_counter()
            _model = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            logger.info(
                "duplex: loaded Silero VAD from %s in %.0f ms",
                path,
                (time.perf_counter() - started) * 1e3,
            )
        return _model


class SileroVad:
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
        self.threshold = threshold
        self.model = silero_model()
        window_ms = 1000 * SILERO_WINDOW / SILERO_RATE
        self._turns = _Turns(window_ms, min_speech_duration_ms, silence_duration_ms, start_ms)
        self._sr = np.array(SILERO_RATE, dtype=np.int64)
        self._rest: Any = None
        self._state: Any = None  # the model's recurrent state (2, batch 1, 128)
        self._context: Any = None
        self.reset()

    @property
    def speaking(self) -> bool:
        return self._turns.speaking

    def probability(self, window: Any) -> float:
        """Score one 512-sample window at 16 kHz, advancing the recurrent state."""
        x = np.concatenate([self._context, window])[None, :]
        out, self._state = self.model.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = x[0, -SILERO_CONTEXT:]
        return float(out[0, 0])

    def feed(self, samples: Any) -> list[VadEvent]:
        samples = np.asarray(samples, dtype=np.float32)
        if self.rate != SILERO_RATE:
            from omni_duplex.audio import resample

            samples = resample(samples, self.rate, SILERO_RATE)
        data = np.concatenate([self._rest, samples])
        n = data.size // SILERO_WINDOW
        self._rest = data[n * SILERO_WINDOW :]
        events = []
        for i in range(n):
            p = self.probability(data[i * SILERO_WINDOW : (i + 1) * SILERO_WINDOW])
            needed = self.threshold - SILERO_HYSTERESIS if self.speaking else self.threshold
            if event := self._turns.step(p >= needed):
                events.append(event)
        return events

    def reset(self) -> None:
        self._turns.reset()
        self._rest = np.zeros(0, dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(SILERO_CONTEXT, dtype=np.float32)


def make_vad(
    kind: str,
    rate: int,
    *,
    threshold: float | None = None,
    min_speech_duration_ms: int,
    silence_duration_ms: int,
    start_ms: int = 0,
) -> Vad:
    """A detector of ``kind`` (``silero`` | ``energy``); ``threshold=None``: the kind's default."""
    classes: dict[str, type[SileroVad] | type[EnergyVad]] = {
        "silero": SileroVad,
        "energy": EnergyVad,
    }
    if kind not in classes:
        raise DuplexError("invalid_session_config", f"unknown VAD {kind!r}: one of {VAD_KINDS}")
    return classes[kind](
        rate,
        threshold=DEFAULT_THRESHOLD[kind] if threshold is None else threshold,
        min_speech_duration_ms=min_speech_duration_ms,
        silence_duration_ms=silence_duration_ms,
        start_ms=start_ms,
    )
