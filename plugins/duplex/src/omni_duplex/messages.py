"""Engine → orchestrator messages of the duplex engine (control ops are correlated calls)."""

from __future__ import annotations

from typing import Any

import msgspec
from omni_core.extend import EngineMessage


class DuplexMessage(EngineMessage):
    session_id: str


class OpenSession(DuplexMessage):
    rpc_key: tuple[str, str]
    config: dict[str, Any]
    stream: Any = None
    client: str | None = None  # who opens it (the peer address): max_sessions_per_client


class CloseSession(DuplexMessage):
    rpc_key: tuple[str, str] | None = None
    reason: str = "client_close"


class ResumeSession(DuplexMessage):
    rpc_key: tuple[str, str]
    expected_generation: int
    stream: Any = None


class TouchSession(DuplexMessage):
    rpc_key: tuple[str, str] | None = None
    activity: str = "heartbeat"  # heartbeat | detach | attach


class SessionCommand(DuplexMessage):
    command: Any


class ControlResult(msgspec.Struct, kw_only=True):
    ok: bool
    session_id: str
    lease_generation: int = 0
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    session: dict[str, Any] = msgspec.field(default_factory=dict)
    error_code: str = ""
    error_message: str = ""
    error_retryable: bool = False
    error_retry_after_s: float | None = None
