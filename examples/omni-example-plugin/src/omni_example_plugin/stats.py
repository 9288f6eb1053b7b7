"""Terminal outcomes counted by ``finish_reason``: the plugin's object for one pipeline.

``omni_pipeline_plugin`` makes one :class:`OutcomeCounter` per engine (per pipeline it takes
part in); its ``omni_request_terminal`` method is that engine's observer only, and it is
unregistered when the engine shuts down (the counts stay readable on the object). The hook runs
on the engine's orchestrator thread while callers read the counts from their own threads, hence
the lock. Reach an engine's counter with ``engine.pipeline_plugin("example")``.
"""

from __future__ import annotations

import threading
from collections import Counter

from omni_core.plugin import hookimpl


class OutcomeCounter:
    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    @hookimpl
    def omni_request_terminal(self, finish_reason: str) -> None:
        # An observer: it takes only the arguments it needs. It runs on the orchestrator thread
        # for every run of this pipeline that ends (requests, parallel-sampling children,
        # companions): keep it cheap.
        with self._lock:
            self._counts[finish_reason] += 1

    def snapshot(self) -> dict[str, int]:
        """Counts so far, by finish reason (sorted, zeros left out)."""
        with self._lock:
            return {k: v for k, v in sorted(self._counts.items()) if v}
