"""``Orchestrator``: the turn-based orchestrator (one prompt in, streamed outputs out).

Thin: it decides what an ``AddRequest`` means (its ``dispatch_message`` seam) and admits it with
the base's parts (``admissions`` for id checks and the plugins' companions, ``table``,
``terminals`` for the deadline and rejections, ``router`` to start the runs).
"""

from __future__ import annotations

import logging

from omni_core.errors import PluginError, RequestRejected
from omni_core.messages import AddRequest, EngineMessage
from omni_core.orchestrator.admission import bad_request, child_params
from omni_core.orchestrator.base import OrchestratorBase
from omni_core.orchestrator.ids import child_id
from omni_core.orchestrator.routing import unavailable
from omni_core.orchestrator.state import ParentState
from omni_core.outputs import ErrorInfo

logger = logging.getLogger(__name__)

__all__ = ["Orchestrator", "child_params"]


class Orchestrator(OrchestratorBase):
    """Admits ``AddRequest``s: children, companions from ``omni_admit_request``, a deadline."""

    async def dispatch_message(self, msg: EngineMessage) -> bool:
        if isinstance(msg, AddRequest):
            await self.admit(msg)
            return True
        return False

    async def admit(self, msg: AddRequest) -> None:
        """Register a request (children, companions: all or nothing) and submit it."""
        rid = msg.request_id
        needed, finals = self.graph.plan(msg.modalities)
        parent = ParentState(rid, msg.stream)
        problem = self.admissions.id_problem(rid)
        if problem is not None:
            self._reject(parent, finals, bad_request(problem))
            return
        for sid in sorted(needed):
            if not self.pools[sid].has_live():
                self._reject(parent, finals, unavailable(self.pools[sid].stage.name))
                return
        first = self.graph.order[0]
        n = msg.params[first].n
        if n > self.settings.max_n:
            message = f"n={n}: at most {self.settings.max_n} parallel samples (OMNI_MAX_N)"
            self._reject(parent, finals, bad_request(message))
            return
        runs = [
            self.table.new_run(
                rid if n == 1 else child_id(rid, i),
                parent,
                i,
                msg.prompt,
                msg.params if i == 0 else child_params(msg.params, i),
                needed,
                finals,
                msg.source,
            )
            for i in range(n)
        ]
        try:
            companions = [self.admissions.companions(run) for run in runs]
        except RequestRejected as exc:  # the plugin's own status and message
            self._reject(parent, finals, ErrorInfo.from_exception(exc))
            return
        except PluginError as exc:
            self._reject(parent, finals, ErrorInfo.from_exception(exc, status_code=400))
            return
        if n > 1 or any(companions):
            problem = self.admissions.derived_ids_problem(rid, runs, companions)
            if problem is not None:
                self._reject(parent, finals, bad_request(problem))
                return
        self.table.parents[rid] = parent
        for run, extra in zip(runs, companions, strict=True):
            self.register_run(run)
            for companion in extra:
                self.register_run(companion)
        deadline = msg.params[first].deadline_s
        if deadline is not None:
            self.terminals.arm_deadline(parent, deadline)
        for run in runs:
            if run.terminal:
                continue
            await self.router.start(run)
            for companion in run.companions:
                if not companion.terminal:
                    await self.router.start(companion)

    def _reject(self, parent: ParentState, finals: tuple[int, ...], error: ErrorInfo) -> None:
        """The one error terminal of a request refused before admission."""
        self.terminals.emit_error(parent, 0, finals[-1], error)
