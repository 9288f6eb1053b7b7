"""``DuplexOmniEngine``: the ``duplex`` engine kind — sessions instead of requests.

Control ops (open, close, resume, touch) are correlated calls to the orchestrator; commands are
one-way and reach the session in caller order. Events arrive on the session's stream in the
caller's event loop. Exactly one terminal event (``session.closed`` or ``session.expired``) ends
each session; a dead engine raises :class:`~omni_core.errors.EngineDeadError` instead.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from omni_core import ConfigError, EngineDeadError
from omni_core.extend import OmniEngineBase, OrchestratorBase, RequestStream

from omni_duplex.config import DuplexSection
from omni_duplex.errors import DuplexError
from omni_duplex.messages import (
    CloseSession,
    ControlResult,
    OpenSession,
    ResumeSession,
    SessionCommand,
    TouchSession,
)
from omni_duplex.model import load_model
from omni_duplex.orchestrator import DuplexOrchestrator
from omni_duplex.protocol import Command, DuplexEvent

CONTROL_TIMEOUT_S = 10.0


class DuplexOmniEngine(OmniEngineBase):
    """``DuplexOmniEngine(pipeline)`` — or ``omni_core.create_engine`` on a pipeline with
    ``engine: duplex``."""

    def validate_deployment(self) -> None:
        section = self.pipeline.sections.get("duplex")
        self.duplex_config = section if isinstance(section, DuplexSection) else DuplexSection()
        self.model = load_model(self.plugins, self.pipeline, self.duplex_config)
        self.model.bind(self)
        if self.duplex_config.vad == "silero":  # fail before any stage starts, and warm it up
            from omni_duplex.vad import silero_model

            try:
                silero_model()
            except DuplexError as exc:
                raise ConfigError([f"duplex.vad: {exc.message}"]) from None

    def create_orchestrator(self, **kwargs: Any) -> OrchestratorBase:
        return DuplexOrchestrator(
            section=self.duplex_config,
            model=self.model,
            default_params=self.default_params,
            **kwargs,
        )

    @property
    def capabilities(self) -> dict[str, Any]:
        return {**self.model.capabilities(), "max_sessions": self.duplex_config.max_sessions}

    # --- control ops --------------------------------------------------------------------------
    async def open_session(
        self,
        config: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        client: str | None = None,
    ) -> DuplexSession:
        """A new session (``session.created`` is its first event). ``client`` (the peer's
        address; None: not counted) holds at most ``max_sessions_per_client`` sessions."""
        sid = f"duplex-{uuid.uuid4().hex}"
        stream = RequestStream(sid, asyncio.get_running_loop())
        self.track_stream(sid, stream)
        key = ("duplex", uuid.uuid4().hex)
        msg = OpenSession(
            session_id=sid, rpc_key=key, config=dict(config or {}), stream=stream, client=client
        )
        try:
            result = await self._control(key, msg, sid, timeout)
        except BaseException:
            self.untrack_stream(sid, stream)
            raise
        return DuplexSession(self, sid, stream, result)

    async def close_session(
        self, session_id: str, reason: str = "client_close", *, timeout: float | None = None
    ) -> None:
        """Close (idempotent). ``session.closed`` follows once the stage requests are gone."""
        key = ("duplex", uuid.uuid4().hex)
        msg = CloseSession(session_id=session_id, rpc_key=key, reason=reason)
        await self._control(key, msg, session_id, timeout)

    async def resume_session(
        self, session_id: str, expected_generation: int, *, timeout: float | None = None
    ) -> DuplexSession:
        """Attach a new handle (events missed while detached come first); the generation is a
        compare-and-swap: a stale one fails with ``session_resume_conflict``."""
        stream = RequestStream(session_id, asyncio.get_running_loop())
        key = ("duplex", uuid.uuid4().hex)
        msg = ResumeSession(
            session_id=session_id,
            rpc_key=key,
            expected_generation=expected_generation,
            stream=stream,
        )
        result = await self._control(key, msg, session_id, timeout)
        self.track_stream(session_id, stream)
        return DuplexSession(self, session_id, stream, result)

    async def touch_session(
        self, session_id: str, activity: str = "heartbeat", *, timeout: float | None = None
    ) -> int:
        """``heartbeat`` (activity) or ``detach`` (the transport went away: disconnect grace
        starts). Returns the lease generation."""
        key = ("duplex", uuid.uuid4().hex)
        msg = TouchSession(session_id=session_id, rpc_key=key, activity=activity)
        result = await self._control(key, msg, session_id, timeout)
        return result.lease_generation

    async def _control(
        self, key: tuple[str, str], msg: Any, session_id: str, timeout: float | None
    ) -> ControlResult:
        try:
            result = await self.call(key, msg, CONTROL_TIMEOUT_S if timeout is None else timeout)
        except TimeoutError:
            raise DuplexError(
                "timeout",
                "the engine did not answer in time",
                retryable=True,
                session_id=session_id,
            ) from None
        except EngineDeadError as exc:
            raise DuplexError("engine_dead", str(exc), session_id=session_id) from None
        if not isinstance(result, ControlResult):
            raise DuplexError("internal_error", f"unexpected result {type(result).__name__}")
        if not result.ok:
            raise DuplexError(
                result.error_code,
                result.error_message,
                retryable=result.error_retryable,
                session_id=session_id,
                retry_after_s=result.error_retry_after_s,
            )
        return result

    # --- commands -----------------------------------------------------------------------------
    def send(self, session_id: str, command: Command) -> None:
        """One-way; applied in call order. Errors about the command arrive as ``error`` events."""
        if not isinstance(command, Command):
            raise DuplexError("invalid_command", f"not a command: {type(command).__name__}")
        try:
            accepted = self.post(SessionCommand(session_id=session_id, command=command))
        except EngineDeadError as exc:
            raise DuplexError("engine_dead", str(exc), session_id=session_id) from None
        if not accepted:
            raise DuplexError(
                "engine_backpressure",
                "the engine's request queue is full",
                retryable=True,
                session_id=session_id,
            )

    def session_count(self) -> int:
        orchestrator = self.orchestrator
        return (
            len(orchestrator.sessions.sessions)
            if isinstance(orchestrator, DuplexOrchestrator)
            else 0
        )


class DuplexSession:
    """A caller's handle on one session (the session itself lives in the engine)."""

    def __init__(
        self,
        engine: DuplexOmniEngine,
        session_id: str,
        stream: RequestStream,
        result: ControlResult,
    ) -> None:
        self.engine = engine
        self.id = session_id
        self.capabilities = result.capabilities
        self.session = result.session
        self.lease_generation = result.lease_generation
        self.closed = False
        self._stream = stream

    def send(self, command: Command) -> None:
        self.engine.send(self.id, command)

    async def recv(self) -> DuplexEvent:
        """The next event; after the terminal one, :class:`DuplexError` ``session_closed``."""
        if self.closed:
            raise DuplexError("session_closed", "the session has ended", session_id=self.id)
        stream = self._stream
        if not stream.items:
            await stream.wait()
        item = stream.items.popleft()
        if isinstance(item, BaseException):
            self.closed = True
            raise item
        if item.terminal:
            self.closed = True
            self.engine.untrack_stream(self.id, stream)
        return item

    async def events(self) -> AsyncIterator[DuplexEvent]:
        """Every event up to and including the terminal one."""
        while not self.closed:
            yield await self.recv()

    async def close(self, reason: str = "client_close") -> None:
        await self.engine.close_session(self.id, reason)

    async def detach(self) -> None:
        self.lease_generation = await self.engine.touch_session(self.id, "detach")

    async def heartbeat(self) -> None:
        self.lease_generation = await self.engine.touch_session(self.id, "heartbeat")
