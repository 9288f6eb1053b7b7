"""``SessionManager``: admission, control ops, leases and the reaper (one per orchestrator).

Everything runs on the orchestrator loop. Capacity counts open *and* closing sessions: a slot is
released only once the session's stage requests are cleaned up (then its terminal event goes
out). Lease deadlines are timers that wake the reaper; the reaper logs and survives any failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from omni_duplex import protocol as P
from omni_duplex.config import parse_session_config
from omni_duplex.errors import DuplexError
from omni_duplex.messages import (
    CloseSession,
    ControlResult,
    DuplexMessage,
    OpenSession,
    ResumeSession,
    SessionCommand,
    TouchSession,
)
from omni_duplex.session import SessionRunner, _Close
from omni_duplex.session_shape import check_voice

if TYPE_CHECKING:
    from omni_core import SamplingParams

    from omni_duplex.config import DuplexSection
    from omni_duplex.model import DuplexModel
    from omni_duplex.orchestrator import DuplexOrchestrator

logger = logging.getLogger(__name__)


class SessionManager:
    def __init__(
        self,
        orch: DuplexOrchestrator,
        section: DuplexSection,
        model: DuplexModel,
        default_params: dict[int, SamplingParams],
    ) -> None:
        self.orch = orch
        self.section = section
        self.model = model
        self.default_params = default_params
        self.sessions: dict[str, SessionRunner] = {}
        self.run_owner: dict[str, SessionRunner] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._due: set[str] = set()
        self._wake = asyncio.Event()
        self.reaper_failures = 0

    def capabilities(self) -> dict[str, Any]:
        return {**self.model.capabilities(), "max_sessions": self.section.max_sessions}

    # --- dispatch (request handler; never blocks) ---------------------------------------------
    def dispatch(self, msg: DuplexMessage) -> None:
        if isinstance(msg, SessionCommand):
            self._admit(msg)
        elif isinstance(msg, OpenSession):
            self._control(msg.rpc_key, msg.session_id, lambda: self._open(msg))
        elif isinstance(msg, CloseSession):
            self.begin_close(msg.session_id, P.SESSION_CLOSED, msg.reason, msg.rpc_key)
        elif isinstance(msg, ResumeSession):
            self._control(msg.rpc_key, msg.session_id, lambda: self._resume(msg))
        elif isinstance(msg, TouchSession):
            self._control(msg.rpc_key, msg.session_id, lambda: self._touch(msg))

    def _control(self, key: Any, session_id: str, op: Any) -> None:
        try:
            result = op()
        except DuplexError as exc:
            result = ControlResult(
                ok=False,
                session_id=session_id,
                error_code=exc.code,
                error_message=exc.message,
                error_retryable=exc.retryable,
                error_retry_after_s=exc.retry_after_s,
            )
        if key is not None:
            self.orch.reply(key, result)

    def reply_ok(self, key: Any, runner: SessionRunner) -> None:
        if key is not None:
            self.orch.reply(key, self._result(runner))

    def _result(self, runner: SessionRunner) -> ControlResult:
        return ControlResult(
            ok=True,
            session_id=runner.id,
            lease_generation=runner.lease.generation,
            capabilities=self.capabilities(),
            session=runner.config.public(),
        )

    def _runner(self, session_id: str) -> SessionRunner:
        runner = self.sessions.get(session_id)
        if runner is None or runner.state == "closed":
            raise DuplexError("unknown_session", f"no session '{session_id}'")
        if runner.state != "open":
            raise DuplexError("session_closed", f"session '{session_id}' is closing")
        return runner

    # --- control ops --------------------------------------------------------------------------
    def _open(self, msg: OpenSession) -> ControlResult:
        sid = msg.session_id
        if sid in self.sessions:
            raise DuplexError("session_exists", f"session '{sid}' already exists")
        if len(self.sessions) >= self.section.max_sessions:
            logger.info("duplex: refused session %s: %d sessions", sid, len(self.sessions))
            now = time.monotonic()
            ends = [  # when the first detached session expires, if any is
                r.lease.detached_at + r.lease.disconnect_grace_s - now
                for r in self.sessions.values()
                if r.state == "open" and r.lease.detached_at is not None
            ]
            retry = round(max(0.0, min(ends)), 1) if ends else None
            hint = f"; a detached one expires in {retry} s" if retry is not None else ""
            raise DuplexError(
                "resource_exhausted",
                f"the server is at its limit of {self.section.max_sessions} sessions{hint}",
                retryable=True,
                retry_after_s=retry,
            )
        if msg.client is not None:
            self._check_client(msg.client)
        config = parse_session_config({**self.section.session_defaults, **(msg.config or {})})
        check_voice(self.model, config)
        port = self.orch.port
        for stage_id, stage in port.pipeline.stages.items():
            if not port.has_live_replica(stage_id):
                raise DuplexError(
                    "stage_unavailable",
                    f"stage '{stage.name}' has no live replica",
                    retryable=True,
                )
        runner = SessionRunner(self, sid, config, msg.stream)
        runner.client = msg.client
        self.sessions[sid] = runner
        runner.emit(
            P.SESSION_CREATED, session=runner.config.public(), capabilities=self.capabilities()
        )
        runner.task = self.orch.spawn(runner.run(), name=f"duplex-session-{sid}")
        self.schedule(runner)
        return self._result(runner)

    def _check_client(self, client: str) -> None:
        """``max_sessions_per_client``: a client (peer address) holds at most that many open
        sessions, detached ones included, so that reconnecting without resuming cannot take
        every slot. At the cap its oldest detached session is closed for the new one
        (``session.expired``, reason ``client_session_limit``); with none detached, the new one
        is refused (retryable)."""
        cap = self.section.max_sessions_per_client
        held = [r for r in self.sessions.values() if r.client == client and r.state == "open"]
        if cap is None or len(held) < cap:
            return
        detached = [r for r in held if r.lease.detached_at is not None]
        if detached:
            oldest = min(detached, key=lambda r: r.lease.detached_at or 0.0)
            logger.info("duplex: session %s of client %s closed for its new one", oldest.id, client)
            self.begin_close(oldest.id, P.SESSION_EXPIRED, "client_session_limit")
            return
        logger.info("duplex: refused a session of client %s: it holds %d", client, len(held))
        raise DuplexError(
            "client_session_limit",
            f"this client holds {len(held)} connected sessions, the limit of "
            f"max_sessions_per_client ({cap}); close one first",
            retryable=True,
        )

    def _resume(self, msg: ResumeSession) -> ControlResult:
        runner = self._runner(msg.session_id)
        if not runner.lease.resume(time.monotonic(), msg.expected_generation):
            raise DuplexError(
                "session_resume_conflict",
                f"lease generation is {runner.lease.generation}, not {msg.expected_generation}",
            )
        runner.attach(msg.stream)
        self.schedule(runner)
        return self._result(runner)

    def _touch(self, msg: TouchSession) -> ControlResult:
        runner = self._runner(msg.session_id)
        now = time.monotonic()
        if msg.activity == "detach":
            runner.lease.detach(now)
            runner.detach()
        elif msg.activity == "heartbeat":
            runner.lease.touch(now)
        else:
            raise DuplexError("invalid_argument", f"unknown activity '{msg.activity}'")
        self.schedule(runner)
        return self._result(runner)

    def begin_close(self, session_id: str, terminal: str, reason: str, rpc_key: Any = None) -> None:
        """Irreversible; idempotent. The terminal event follows the stage cleanup."""
        runner = self.sessions.get(session_id)
        if runner is None or runner.state != "open":
            if rpc_key is not None:
                self.orch.reply(rpc_key, ControlResult(ok=True, session_id=session_id))
            return
        runner.state = "closing"
        runner.close_terminal, runner.close_reason = terminal, reason
        self._cancel_timer(session_id)
        runner.mailbox.put_nowait(_Close(rpc_key))

    # --- commands -----------------------------------------------------------------------------
    def _admit(self, msg: SessionCommand) -> None:
        runner = self.sessions.get(msg.session_id)
        cmd = msg.command
        if runner is None or runner.terminal_sent:
            logger.debug("duplex: command for unknown session %s dropped", msg.session_id)
            return
        if runner.state != "open":
            runner.error("session_closed", "the session is closing", event_id=cmd.event_id)
            return
        try:
            self._reserve(runner, cmd)
        except DuplexError as exc:
            runner.error(exc.code, exc.message, retryable=exc.retryable, event_id=cmd.event_id)
            return
        runner.lease.touch(time.monotonic())
        runner.mailbox.put_nowait(cmd)

    def _reserve(self, runner: SessionRunner, cmd: P.Command) -> None:
        """Admission: input bytes (audio and typed text) and committed turns are bounded; a
        command over a limit is refused whole (nothing of it is kept)."""
        section = self.section
        size = 0
        if isinstance(cmd, P.AppendAudio):
            size = len(cmd.audio)
        elif isinstance(cmd, P.AppendText):
            size = len(cmd.text.encode("utf-8", "surrogatepass"))
        commits = int(isinstance(cmd, P.Commit) or (isinstance(cmd, P.AppendText) and cmd.commit))
        limit = section.max_pending_input_bytes
        if size > limit:
            raise DuplexError(
                "input_too_large",
                f"{size} bytes of input in one event; the limit is {limit} "
                "(max_pending_input_bytes)",
            )
        if size and runner.pending_bytes + size > limit:
            raise DuplexError(
                "input_backpressure",
                f"more than {limit} bytes of input pending (max_pending_input_bytes)",
                retryable=True,
            )
        if commits and len(runner.turns) + runner.queued_commits >= section.max_pending_turns:
            raise DuplexError(
                "input_backpressure",
                f"more than {section.max_pending_turns} committed turns pending "
                "(max_pending_turns)",
                retryable=True,
            )
        runner.pending_bytes += size
        runner.queued_commits += commits

    # --- stage requests -----------------------------------------------------------------------
    def on_runs_ended(self, run_ids: list[str]) -> None:
        for rid in run_ids:
            runner = self.run_owner.pop(rid, None)
            if runner is not None:
                runner.live_runs.discard(rid)

    # --- leases and the reaper ----------------------------------------------------------------
    def schedule(self, runner: SessionRunner) -> None:
        if runner.state != "open":
            return
        self._cancel_timer(runner.id)
        now = time.monotonic()
        reason, at = runner.lease.expiry(now, busy=runner.response is not None)
        if reason is not None:
            self._wake_for(runner.id)
        elif at is not None:
            self._timers[runner.id] = self.orch.loop.call_later(at - now, self._wake_for, runner.id)

    def defer_cleanup(self, runner: SessionRunner) -> None:
        runner.cleanup_pending = True
        self._cancel_timer(runner.id)
        self._timers[runner.id] = self.orch.loop.call_later(
            self.section.cleanup_retry_s, self._wake_for, runner.id
        )

    def _cancel_timer(self, session_id: str) -> None:
        timer = self._timers.pop(session_id, None)
        if timer is not None:
            timer.cancel()

    def _wake_for(self, session_id: str) -> None:
        self._timers.pop(session_id, None)
        self._due.add(session_id)
        self._wake.set()

    async def reaper_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            due, self._due = self._due, set()
            for sid in sorted(due):
                try:
                    self._reap(sid)
                except Exception:
                    self.reaper_failures += 1
                    logger.exception("duplex reaper failed on session %s; retrying", sid)
                    runner = self.sessions.get(sid)
                    if runner is not None:
                        self._timers[sid] = self.orch.loop.call_later(
                            self.section.cleanup_retry_s, self._wake_for, sid
                        )

    def _reap(self, session_id: str) -> None:
        runner = self.sessions.get(session_id)
        if runner is None:
            return
        if runner.state == "closing":
            if runner.cleanup_pending:
                runner.cleanup_pending = False
                runner.mailbox.put_nowait(_Close())
            return
        reason, _ = runner.lease.expiry(time.monotonic(), busy=runner.response is not None)
        if reason is None:
            self.schedule(runner)
        else:
            logger.info("duplex session %s expired: %s", session_id, reason)
            self.begin_close(session_id, P.SESSION_EXPIRED, reason)

    def finalize(self, runner: SessionRunner) -> None:
        """The session's stage requests are gone: release its slot."""
        self._cancel_timer(runner.id)
        if self.sessions.get(runner.id) is runner:
            del self.sessions[runner.id]

    def shutdown(self) -> None:
        """Silent: no terminal events (callers get EngineDeadError from the engine)."""
        for sid in list(self._timers):
            self._cancel_timer(sid)
        for runner in self.sessions.values():
            runner.state = "closed"
            runner.terminal_sent = True
        self.sessions.clear()
        self.run_owner.clear()
