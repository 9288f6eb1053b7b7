"""What a running benchmark is doing, for whoever shows it (``omni bench`` does, issue 41).

A benchmark calls :func:`phase` when it starts something that takes a while ("starting the bare
AsyncLLM", "omni-core 16x16 tokens, run 1/1"); a reporter installed with :func:`reporting`
receives each phase's text. Without a reporter (tests, scripts) a phase only goes to the debug
log. :func:`shown` is ``omni bench``'s display of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

Reporter = Callable[[str], None]
_reporters: list[Reporter] = []


def phase(text: str) -> None:
    """Say what the running benchmark does now (until its next phase or its end)."""
    logger.debug("bench phase: %s", text)
    if _reporters:
        _reporters[-1](text)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Send the phases of the benchmarks run inside the block to ``reporter`` (the innermost
    reporter wins; the previous one is back after the block)."""
    _reporters.append(reporter)
    try:
        yield
    finally:
        _reporters.remove(reporter)


QUICK_NOTE = (
    "--quick: smaller workloads and one round, a smoke test: these figures are not comparable "
    "with a full run's or with docs/benchmarks.md"
)


@contextmanager
def shown(name: str, console: Any) -> Iterator[None]:
    """``omni bench``'s display of benchmark ``name`` while it runs, on ``console`` (stderr):
    on a terminal one live line (spinner, the current phase, the time elapsed); elsewhere (CI
    logs) a line per phase with the seconds since the benchmark started; then its total time."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    start = time.monotonic()

    def line(text: str) -> None:
        console.print(f"bench {name}: {text} (at {time.monotonic() - start:.0f} s)", markup=False)

    if not console.is_terminal:
        line("started")
        try:
            with reporting(line):
                yield
        except BaseException:
            line("failed")
            raise
        line("done")
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    outcome = "failed after"
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(f"bench {name}: started", total=None)
            with reporting(lambda text: bar.update(task, description=f"bench {name}: {text}")):
                yield
        outcome = "done in"
    finally:
        console.print(f"bench {name}: {outcome} {time.monotonic() - start:.0f} s", markup=False)
