"""The loop-lag watchdog: a WARNING naming the stage whose code blocks the orchestrator loop.

Everything on the orchestrator loop shares one thread: a stage kind's code (an ``async`` python
callable, a client's ``add_request``), a bridge or a hook that blocks it stalls every request.
The watchdog costs nothing on the per-token path, and nothing while the engine is idle:

* while there is work (``busy()``: the orchestrator holds a request), a timer on the loop beats
  every ``period`` seconds (one ``call_later`` callback that stores ``time.monotonic()``);
* a daemon thread (``omni-loop-watchdog``) wakes every ``period`` seconds while the loop beats
  and, when the last beat is older than ``period + threshold`` (the loop missed its timer by more
  than ``threshold``), samples the orchestrator thread's stack (``sys._current_frames``) and logs
  one WARNING per stall: the stage whose code is running (the innermost frame of a stage client's
  method, by its ``label``: ``stage 'x' replica 0``) and the innermost frame (file, line,
  function);
* idle (the first beat that finds ``busy()`` false), the timer is not re-armed and the thread
  sleeps on an event until :meth:`LoopWatchdog.wake` (the orchestrator calls it for every batch of
  messages it takes in, before handling them): an idle engine's watchdog never wakes up.

A stall shorter than about ``threshold`` is never reported; one between ``threshold`` and
``threshold + period`` may be missed (the thread samples every ``period``); one that starts while
no request is in flight (a plugin's background task blocking an idle loop) is not watched.
``threshold`` is ``OMNI_LOOP_LAG_WARN_S`` (0 turns the watchdog off).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)

PERIOD_S = 0.05


def _always() -> bool:
    return True


class LoopWatchdog:
    """Watches ``loop`` (running on the calling thread) from a thread of its own, while
    ``busy()`` (asked on the loop, at each beat) says there is work."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold_s: float,
        period_s: float = PERIOD_S,
        busy: Callable[[], bool] = _always,
    ) -> None:
        self.loop = loop
        self.threshold_s = threshold_s
        self.period_s = period_s
        self.busy = busy
        self.stalls = 0  # how many stalls it reported (tests, diagnostics)
        self._beat = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._watching = threading.Event()  # set while the loop beats; the thread sleeps on it
        self._loop_thread = threading.get_ident()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread and watch until the loop is idle (call on the loop's thread)."""
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, name="omni-loop-watchdog", daemon=True)
        self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Work arrived (call on the loop's thread): beat and watch until ``busy()`` is false.
        A no-op while already watching: one attribute read on the message path."""
        if self._timer is not None or self._stop.is_set():
            return
        self._beat = time.monotonic()
        self._timer = self.loop.call_later(self.period_s, self._tick)
        self._watching.set()

    def stop(self) -> None:
        self._stop.set()
        self._watching.set()  # release the thread's idle wait
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._beat = time.monotonic()
        if self.busy():
            self._timer = self.loop.call_later(self.period_s, self._tick)
        else:  # idle: the thread goes back to sleep until the next wake()
            self._timer = None
            self._watching.clear()

    def _watch(self) -> None:
        reported = -1.0  # the beat of the stall already reported
        limit = self.period_s + self.threshold_s
        while True:
            self._watching.wait()
            if self._stop.wait(self.period_s):
                return
            beat = self._beat
            lag = time.monotonic() - beat
            if lag <= limit or beat == reported or not self._watching.is_set():
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None:  # the loop's thread ended
                return
            reported = beat
            self.stalls += 1
            stage, where = culprit(frame)
            logger.warning(
                "the orchestrator loop is blocked (%.0f ms so far, more than %.0f ms): %s is "
                "running on it, at %s; move blocking work off the loop (a thread, a process)",
                (lag - self.period_s) * 1000,
                self.threshold_s * 1000,
                stage or "no stage's code",
                where,
            )


def culprit(frame: FrameType) -> tuple[str | None, str]:
    """(the label of the stage client whose method is innermost on the stack, if any;
    ``file:line in function`` of the innermost frame)."""
    code = frame.f_code
    where = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
    current: FrameType | None = frame
    while current is not None:
        owner = current.f_locals.get("self") if "self" in current.f_code.co_varnames else None
        label = getattr(owner, "label", None)
        if isinstance(label, str) and label.startswith("stage "):
            return label, where
        current = current.f_back
    return None, where
