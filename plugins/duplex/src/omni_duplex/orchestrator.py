"""``DuplexOrchestrator``: the turn-free orchestrator; sessions instead of caller requests.

It fills the seams of :class:`~omni_core.orchestrator.base.OrchestratorBase`:
``_dispatch_message`` (session control ops and commands), ``_background_tasks`` (the lease
reaper), ``_shutdown_extensions`` (silent session shutdown), ``_on_stage_submitted`` (stage
bindings per session), ``_handle_forward_failure`` (logs the owning session; the request then
fails into its session as a failed response) and ``_cleanup_request_ids`` (a session learns that
its stage requests are gone). Session requests are runs whose caller stream is the session's
sink: their outputs never reach a caller queue.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from omni_core.orchestrator.base import OrchestratorBase
from omni_core.orchestrator.state import ParentState, RunState

from omni_duplex.errors import DuplexError
from omni_duplex.manager import SessionManager
from omni_duplex.messages import DuplexMessage

if TYPE_CHECKING:
    from omni_core.messages import EngineMessage
    from omni_core.outputs import ErrorInfo
    from omni_core.sampling import SamplingParams

    from omni_duplex.config import DuplexSection
    from omni_duplex.model import DuplexModel, ResponsePlan
    from omni_duplex.session import SessionRunner

logger = logging.getLogger(__name__)

SESSION_TAG = "duplex_session"


class DuplexOrchestrator(OrchestratorBase):
    def __init__(
        self,
        *,
        section: DuplexSection,
        model: DuplexModel,
        default_params: dict[int, SamplingParams],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sessions = SessionManager(self, section, model, default_params)

    # --- seams --------------------------------------------------------------------------------
    async def _dispatch_message(self, msg: EngineMessage) -> bool:
        if isinstance(msg, DuplexMessage):
            self.sessions.dispatch(msg)
            return True
        return False

    def _background_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        return [*super()._background_tasks(), self.sessions.reaper_loop]

    async def _shutdown_extensions(self) -> None:
        self.sessions.shutdown()
        await super()._shutdown_extensions()

    def _on_stage_submitted(self, run: RunState, stage_id: int, replica: int) -> None:
        runner = self.sessions.run_owner.get(run.run_id)
        if runner is not None:
            runner.submissions.setdefault(run.run_id, []).append(stage_id)
        super()._on_stage_submitted(run, stage_id, replica)

    async def _handle_forward_failure(
        self, run: RunState, stage_id: int, exc: BaseException
    ) -> bool:
        session = run.tags.get(SESSION_TAG)
        if session is not None:
            logger.warning(
                "duplex session %s: forward to stage %d failed: %s", session, stage_id, exc
            )
        return await super()._handle_forward_failure(run, stage_id, exc)

    def _cleanup_request_ids(
        self, run_ids: list[str], finish_reason: str, error: ErrorInfo | None
    ) -> None:
        self.sessions.on_runs_ended(run_ids)
        super()._cleanup_request_ids(run_ids, finish_reason, error)

    # --- the session port ---------------------------------------------------------------------
    def reply(self, key: tuple[str, str], result: Any) -> None:
        self._reply(key, result)

    async def start_session_run(
        self, runner: SessionRunner, run_id: str, plan: ResponsePlan
    ) -> None:
        """Register and submit one session-owned stage request (its outputs go to the session)."""
        needed, finals = self.plan(plan.modalities)
        for sid in sorted(needed):
            if not self.pools[sid].has_live():
                raise DuplexError(
                    "stage_unavailable",
                    f"stage '{self.pools[sid].stage.name}' has no live replica",
                    retryable=True,
                )
        params = {**self.sessions.default_params, **(plan.params or {})}
        run = self.new_run(
            run_id, ParentState(run_id, runner.sink), 0, plan.prompt, params, needed, finals
        )
        run.tags[SESSION_TAG] = runner.id
        self.sessions.run_owner[run_id] = runner
        runner.live_runs.add(run_id)
        self.register_run(run)
        await self.start_run(run)

    async def abort_session_runs(self, run_ids: list[str]) -> bool:
        """Abort session requests on every stage that holds them; False if a stage refused."""
        result = await self.abort(run_ids, reason="cancelled")
        if not result.success:
            logger.warning("duplex: abort of %s failed: %s", run_ids, result.error)
        return result.success
