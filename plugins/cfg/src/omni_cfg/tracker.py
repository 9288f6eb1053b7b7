"""``Tracker``: which companions belong to which parent, what they delivered, who waits.

Pure bookkeeping (no orchestrator, no I/O); one per orchestrator, used only on its loop.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Bundle:
    """A parent and its companions (role by companion id, in admission order)."""

    parent_id: str
    roles: dict[str, str]
    parent_weight: float
    weights: dict[str, float]  # by role
    timeout_s: float
    outputs: dict[str, Any] = field(default_factory=dict)  # companion id -> processed output
    deadline: float | None = None  # set when first deferred; re-deferring keeps it
    deferred: bool = False

    @property
    def complete(self) -> bool:
        return len(self.outputs) == len(self.roles)

    @property
    def missing(self) -> list[str]:
        return [cid for cid in self.roles if cid not in self.outputs]


class Tracker:
    """Bundles by parent id, plus the parent of every live companion id."""

    def __init__(self) -> None:
        self.bundles: dict[str, Bundle] = {}
        self.owner: dict[str, str] = {}  # live companion id -> parent id
        self._deadlines: list[tuple[float, str]] = []  # heap; stale entries skipped lazily
        self.deferrals = 0  # counters for tests and logs
        self.releases = 0

    def __len__(self) -> int:
        """Entries held: bundles, live companion ids and armed deadlines (0 when idle)."""
        return len(self.bundles) + len(self.owner) + len(self._deadlines)

    # --- registration -------------------------------------------------------------------------
    def register_parent(self, bundle: Bundle) -> None:
        self.bundles[bundle.parent_id] = bundle

    def register_companion(self, companion_id: str, parent_id: str) -> None:
        bundle = self.bundles.get(parent_id)
        if bundle is None or companion_id not in bundle.roles:
            raise KeyError(f"companion '{companion_id}' of unregistered parent '{parent_id}'")
        self.owner[companion_id] = parent_id

    def parent_of(self, companion_id: str) -> str | None:
        return self.owner.get(companion_id)

    # --- delivery -----------------------------------------------------------------------------
    def deliver(self, companion_id: str, output: Any) -> str | None:
        """A companion's processed output arrived. Idempotent: a repeat changes nothing.

        Returns the parent id when the parent is deferred and its bundle is now complete.
        """
        parent_id = self.owner.get(companion_id)
        bundle = self.bundles.get(parent_id) if parent_id is not None else None
        if bundle is None or companion_id in bundle.outputs:
            return None
        bundle.outputs[companion_id] = output
        if bundle.deferred and bundle.complete:
            self.releases += 1
            return bundle.parent_id
        return None

    def delivered(self, companion_id: str, parent_id: str) -> bool:
        bundle = self.bundles.get(parent_id)
        return bundle is not None and companion_id in bundle.outputs

    def defer(self, parent_id: str, now: float) -> bool:
        """Mark the parent waiting; arm its deadline once. True if a new deadline was armed."""
        bundle = self.bundles[parent_id]
        bundle.deferred = True
        self.deferrals += 1
        if bundle.deadline is not None:
            return False
        bundle.deadline = now + bundle.timeout_s
        heapq.heappush(self._deadlines, (bundle.deadline, parent_id))
        return True

    def undefer(self, parent_id: str) -> None:
        bundle = self.bundles.get(parent_id)
        if bundle is not None:
            bundle.deferred = False

    # --- deadlines ----------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """The earliest armed deadline of a still-waiting parent (stale entries dropped)."""
        while self._deadlines:
            when, parent_id = self._deadlines[0]
            bundle = self.bundles.get(parent_id)
            if bundle is not None and bundle.deferred and bundle.deadline == when:
                return when
            heapq.heappop(self._deadlines)
        return None

    def pop_expired(self, now: float) -> list[str]:
        """Claim the parents whose deadline passed (a second call does not return them again)."""
        expired = []
        while (when := self.next_deadline()) is not None and when <= now:
            _, parent_id = heapq.heappop(self._deadlines)
            bundle = self.bundles[parent_id]
            bundle.deferred = False
            expired.append(parent_id)
        return expired

    # --- cleanup ------------------------------------------------------------------------------
    def forget_companion(self, companion_id: str) -> None:
        """A companion ended: drop its id; its delivered output stays in the parent's bundle."""
        self.owner.pop(companion_id, None)

    def cleanup_parent(self, parent_id: str) -> list[str]:
        """The parent ended: drop its bundle and outputs; returns its companion ids."""
        bundle = self.bundles.pop(parent_id, None)
        if bundle is None:
            return []
        for companion_id in bundle.roles:
            self.owner.pop(companion_id, None)
        if bundle.deadline is not None:
            self._deadlines = [e for e in self._deadlines if e[1] != parent_id]
            heapq.heapify(self._deadlines)
        return list(bundle.roles)
