"""``StagePool``: the replicas of one logical stage, round-robin pick.

Placement only: which replica serves a request. Which runs a replica holds (the sticky
bindings) is the orchestrator's request table's; which stage comes next is the orchestrator's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from omni_core import progress
from omni_core.errors import StartupError
from omni_core.stage.client import StageClient, StageContext

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedStage

logger = logging.getLogger(__name__)


class StagePool:
    def __init__(self, stage: ResolvedStage, context: StageContext, factory: Any = None) -> None:
        self.stage = stage
        self.factory = factory or stage.kind.client_factory  # the runtime's (ray) or the kind's
        self.context = context
        self.clients: list[StageClient | None] = [None] * stage.config.replicas
        self.errors: list[str | None] = [None] * len(self.clients)  # last failed start, per slot
        self.restarts = 0
        self._next = 0

    @property
    def stage_id(self) -> int:
        return self.stage.id

    def new_client(self, replica: int) -> StageClient:
        client: StageClient = self.factory(self.stage.config, replica, self.context)
        return client

    async def start_replica(self, replica: int) -> StageClient:
        label = f"stage '{self.stage.name}' (id {self.stage.id}) replica {replica}"
        progress.report("stage", label, f"starting ({self.stage.config.kind})")
        try:
            client = self.new_client(replica)
            await client.start()
        except Exception as exc:
            self.errors[replica] = f"{label} failed to start: {type(exc).__name__}: {exc}"
            raise StartupError(self.errors[replica]) from exc
        progress.report("stage", label, "started", done=True)
        self.clients[replica] = client
        self.errors[replica] = None
        return client

    def live(self) -> list[int]:
        return [i for i, c in enumerate(self.clients) if c is not None]

    def has_live(self) -> bool:
        clients = self.clients  # no generator: every admission asks each stage it needs
        return clients.count(None) != len(clients)

    def pick(self, prefer: int | None = None) -> int | None:
        """A live replica: ``prefer`` if it is live, else the next one round-robin."""
        clients = self.clients
        if prefer is not None and clients[prefer] is not None:
            return prefer
        n = len(clients)
        if n == 1:
            return 0 if clients[0] is not None else None
        for offset in range(n):
            idx = (self._next + offset) % n
            if self.clients[idx] is not None:
                self._next = (idx + 1) % n
                return idx
        return None

    def client(self, replica: int) -> StageClient | None:
        return self.clients[replica]

    def evict(self, replica: int) -> StageClient | None:
        """Take a dead replica's client out of its slot (a restart fills it again)."""
        client, self.clients[replica] = self.clients[replica], None
        return client

    def healthy(self, replica: int) -> bool:
        client = self.clients[replica]
        if client is None:
            return False
        try:
            return bool(client.is_healthy())
        except Exception:
            return False
