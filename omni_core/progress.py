"""Start-up progress: what an engine is doing while its caller waits.

Building a model and starting a stage replica can take from seconds to minutes. The steps
report themselves here, process-wide, to the listeners registered with :func:`watch_progress`
(``omni run`` and ``omni serve`` show them as a status line on stderr)::

    from omni_core.progress import watch_progress

    with watch_progress(lambda event: print(event.what, event.detail, event.done)):
        engine = create_engine("tiny-omni")

Events: ``model`` (a registered model is built: ``what`` names it; ``done`` once built),
``stage`` (a stage replica starts: ``what`` is ``stage 'NAME' (id N) replica R``; ``detail``
says what it does; ``log_path``, when set, is the replica's log, whose last line tells what its
worker is doing; ``done`` once it started). Listeners run on the reporting thread (the
orchestrator's, or the caller's): keep them short; one that raises is logged at DEBUG and
skipped. With no listener, reporting costs one check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

__all__ = ["ProgressEvent", "report", "watch_progress"]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One start-up step: ``step`` (``model`` or ``stage``), ``what`` it concerns, ``detail``
    (what it is doing), the log whose last line says more (``log_path``), ``done``."""

    step: Literal["model", "stage"]
    what: str
    detail: str = ""
    log_path: Path | None = None
    done: bool = False


Listener = Callable[[ProgressEvent], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


@contextmanager
def watch_progress(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every :class:`ProgressEvent` reported while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


def report(
    step: Literal["model", "stage"],
    what: str,
    detail: str = "",
    *,
    log_path: Path | None = None,
    done: bool = False,
) -> None:
    """Tell the listeners about a start-up step (nothing to do without one)."""
    if not _listeners:
        return
    event = ProgressEvent(step, what, detail, log_path, done)
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            logger.debug("a progress listener failed on %s", event, exc_info=True)
