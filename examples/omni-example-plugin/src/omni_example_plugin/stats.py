"""Terminal outcomes counted by ``finish_reason`` (fed by the ``omni_request_terminal`` hook).

The hook runs on the engine's orchestrator thread while callers read the counts from their own
threads, hence the lock. Counts are per process.
"""

from __future__ import annotations

import threading
from collections import Counter


class OutcomeCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def record(self, finish_reason: str) -> None:
        with self._lock:
            self._counts[finish_reason] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """Counts recorded after ``before`` (a snapshot), zeros left out."""
        now = self.snapshot()
        delta = {k: v - before.get(k, 0) for k, v in now.items()}
        return {k: v for k, v in sorted(delta.items()) if v}


STATS = OutcomeCounter()
