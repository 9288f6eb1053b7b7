"""``DuplexOrchestrator``: the turn-free orchestrator; sessions instead of caller requests.

It fills the seams of :class:`~omni_core.orchestrator.base.OrchestratorBase` (none of them fires
a plugin hook, so nothing here needs ``super()``): ``dispatch_message`` (session control ops and
commands), ``background_tasks`` (the lease reaper), ``shutdown_extensions`` (silent session
shutdown), ``on_stage_submitted`` (stage bindings per session), ``handle_forward_failure`` (logs
the owning session; the request then fails into its session as a failed response) and
``on_runs_ended`` (a session learns that its stage requests are gone). Session requests are runs
of their own (``open_run``) whose caller stream is the session's sink: their outputs never reach
a caller queue.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from omni_core import StageUnavailableError
from omni_core.extend import OrchestratorBase

from omni_duplex.errors import DuplexError
from omni_duplex.manager import SessionManager
from omni_duplex.messages import DuplexMessage

if TYPE_CHECKING:
    from omni_core import ErrorInfo, SamplingParams
    from omni_core.extend import EngineMessage
    from omni_core.plugin import RequestView

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
    async def dispatch_message(self, msg: EngineMessage) -> bool:
        if isinstance(msg, DuplexMessage):
            self.sessions.dispatch(msg)
            return True
        return False

    def background_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        return [self.sessions.reaper_loop]

    async def shutdown_extensions(self) -> None:
        self.sessions.shutdown()

    def on_stage_submitted(self, run: RequestView, stage_id: int, replica: int) -> None:
        runner = self.sessions.run_owner.get(run.run_id)
        if runner is not None:
            runner.submissions.setdefault(run.run_id, []).append(stage_id)

    async def handle_forward_failure(
        self, run: RequestView, stage_id: int, exc: BaseException
    ) -> bool:
        session = run.tags.get(SESSION_TAG)
        if session is not None:
            logger.warning(
                "duplex session %s: forward to stage %d failed: %s", session, stage_id, exc
            )
        return False  # the request fails into its session as a failed response

    def on_runs_ended(
        self, run_ids: list[str], finish_reason: str, error: ErrorInfo | None
    ) -> None:
        self.sessions.on_runs_ended(run_ids)

    # --- the session port ---------------------------------------------------------------------
    async def start_session_run(
        self, runner: SessionRunner, run_id: str, plan: ResponsePlan
    ) -> None:
        """Register and submit one session-owned stage request (its outputs go to the session)."""
        params = {**self.sessions.default_params, **(plan.params or {})}
        self.sessions.run_owner[run_id] = runner
        runner.live_runs.add(run_id)
        try:
            await self.open_run(
                run_id,
                plan.prompt,
                params,
                runner.sink,
                modalities=plan.modalities,
                tags={SESSION_TAG: runner.id},
            )
        except StageUnavailableError as exc:
            self.sessions.run_owner.pop(run_id, None)
            runner.live_runs.discard(run_id)
            raise DuplexError("stage_unavailable", str(exc), retryable=True) from None

    async def abort_session_runs(self, run_ids: list[str]) -> bool:
        """Abort session requests on every stage that holds them; False if a stage refused."""
        result = await self.abort(run_ids, reason="cancelled")
        if not result.success:
            logger.warning("duplex: abort of %s failed: %s", run_ids, result.error)
        return result.success
