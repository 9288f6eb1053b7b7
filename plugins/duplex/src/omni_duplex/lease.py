"""A session's lease: idle TTL, disconnect grace and the resume generation (compare-and-swap)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Lease:
    idle_ttl_s: float | None
    disconnect_grace_s: float
    last_activity: float
    generation: int = 0
    detached_at: float | None = None

    def touch(self, now: float) -> None:
        self.last_activity = now

    def detach(self, now: float) -> None:
        if self.detached_at is None:
            self.detached_at = now

    def resume(self, now: float, expected_generation: int) -> bool:
        """Re-attach a transport; False (nothing changes) if the generation moved on."""
        if expected_generation != self.generation:
            return False
        self.generation += 1
        self.detached_at = None
        self.last_activity = now
        return True

    def expiry(self, now: float, busy: bool) -> tuple[str | None, float | None]:
        """(reason it expired or None, next time to look again or None)."""
        deadlines: list[float] = []
        if self.detached_at is not None:
            at = self.detached_at + self.disconnect_grace_s
            if now >= at:
                return "disconnect_timeout", None
            deadlines.append(at)
        if self.idle_ttl_s is not None and not busy:  # a busy session is re-armed when idle
            at = self.last_activity + self.idle_ttl_s
            if now >= at:
                return "idle_timeout", None
            deadlines.append(at)
        return None, min(deadlines) if deadlines else None
