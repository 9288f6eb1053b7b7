"""What ``omni run`` / ``omni serve`` show while a person waits for models and stages to start.

:class:`StartupStatus` listens to the engine's start-up steps (:mod:`omni_core.progress`) and
shows the current one with the seconds it has taken: on a terminal a transient spinner line on
stderr (its text updated four times a second, gone before the answer streams); elsewhere (a pipe)
a plain line on stderr once the wait has lasted :attr:`StartupStatus.quiet_s` or a step known to
be slow began (a model build, a worker process loading), then at every new step and at least
every :attr:`StartupStatus.every_s` seconds. A step with a log (a stage's worker process) shows
that log's last line: what the worker is doing now.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from omni_core.progress import ProgressEvent, watch_progress

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LINE_CHARS = 100  # a log line is cut to this many characters


def log_size(path: Path | None) -> int:
    """How many bytes ``path`` holds now (0 if it does not exist)."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def last_line(path: Path | None, start: int = 0, limit: int = 8192) -> str:
    """The last non-empty line ``path`` got past byte ``start`` (a log is appended to: what an
    earlier run wrote is not news; at most the final ``limit`` bytes read), without ANSI codes,
    cut to :data:`LINE_CHARS`; empty when there is none."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as file:
            file.seek(0, 2)
            size = file.tell()
            file.seek(max(start, size - limit))
            text = file.read().decode(errors="replace")
    except OSError:
        return ""
    for line in reversed(text.replace("\r", "\n").splitlines()):
        line = ANSI.sub("", line).strip()
        if line:
            return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
    return ""


class StartupStatus:
    """A status line on stderr while ``title`` (e.g. ``omni run tiny-omni``) starts.

    ``until``: the number of stage replicas whose start ends the wait (``omni serve``: every
    replica of the pipeline; None: the block's end)."""

    quiet_s = 0.5  # plain mode: nothing before the wait lasts this long (a fast start is silent)
    every_s = 5.0  # plain mode: at least one line this often
    tick_s = 0.25

    def __init__(
        self,
        title: str,
        *,
        first_step: str = "loading the pipeline",
        until: int | None = None,
        console: Console | None = None,
    ) -> None:
        self.title = title
        self.until = until
        self.console = console or Console(stderr=True)
        self.started = time.monotonic()
        self.what = first_step
        self.detail = ""
        self.log_path: Path | None = None
        self.log_start = 0  # the log's size when the step began: older lines are an old run's
        self.replicas_started = 0
        self.slow_step = False  # a step known to take long began: plain mode need not wait
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None
        self._watch: Any = None
        self._printed: str | None = None
        self._last_print = 0.0

    # --- listener -------------------------------------------------------------------------------
    def on_event(self, event: ProgressEvent) -> None:
        with self._lock:
            if event.what != self.what:
                self.what, self.log_path = event.what, None
            self.detail = event.detail
            if event.log_path is not None and event.log_path != self.log_path:
                self.log_path, self.log_start = event.log_path, log_size(event.log_path)
            if not event.done and (event.step == "model" or event.log_path is not None):
                self.slow_step = True  # a model build, a worker process: say so at once
            if event.done:
                self.log_path = None
                if event.step == "stage":
                    self.replicas_started += 1
                    if self.until is not None and self.replicas_started >= self.until:
                        self._done.set()

    def state(self) -> tuple[str, str, float]:
        """(current step, its log's last line, seconds since the wait began)."""
        with self._lock:
            step = f"{self.what}: {self.detail}" if self.detail else self.what
            log_path, start = self.log_path, self.log_start
        return step, last_line(log_path, start), time.monotonic() - self.started

    def line(self, state: tuple[str, str, float] | None = None) -> str:
        """The status text (now, or of ``state``): title, step, its log's last line, elapsed."""
        step, tail, elapsed = state or self.state()
        return f"{self.title}: {step}" + (f" | {tail}" if tail else "") + f" ({elapsed:.0f}s)"

    # --- display --------------------------------------------------------------------------------
    def __enter__(self) -> StartupStatus:
        self._watch = watch_progress(self.on_event)
        self._watch.__enter__()
        if self.console.is_terminal:
            self._status = self.console.status(self.line(), spinner="dots")
            self._status.start()
        self._thread = threading.Thread(target=self._tick, name="omni-startup-status", daemon=True)
        self._thread.start()
        return self

    def _tick(self) -> None:
        while not self._done.wait(self.tick_s):
            state = self.state()
            if self._status is not None:
                self._status.update(self.line(state))
                continue
            now = time.monotonic()
            if now - self.started < self.quiet_s and not self.slow_step:
                continue
            step = state[0]
            if step != self._printed or now - self._last_print >= self.every_s:
                print(self.line(state), file=sys.stderr, flush=True)
                self._printed, self._last_print = step, now
        self._stop_display()

    def _stop_display(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._stop_display()
        if self._watch is not None:
            self._watch.__exit__(None, None, None)


@contextmanager
def held_logs() -> Iterator[None]:
    """Log records (and Python warnings) emitted while the block runs (an answer streams) are
    held and handed to the root logger's handlers after it: no warning lands in the middle of
    the answer."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    if not handlers:
        yield
        return
    held: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)

    hold = Hold()
    for handler in handlers:
        root.removeHandler(handler)
    root.addHandler(hold)
    logging.captureWarnings(True)  # Python warnings too (logger py.warnings)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(hold)
        for handler in handlers:
            root.addHandler(handler)
        for record in held:
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
