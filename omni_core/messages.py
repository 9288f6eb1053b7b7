"""Messages from the engine (caller threads) to the orchestrator loop.

They cross a thread boundary as Python objects (same process: no serialization). Results of
correlated calls go back through :class:`~omni_core.engine.rpc.RpcRouter` keyed by ``rpc_key``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from omni_core.sampling import SamplingParams


class EngineMessage(msgspec.Struct, kw_only=True, tag=True):
    """Base of every engine → orchestrator message."""


class AddRequest(EngineMessage):
    request_id: str
    prompt: Any
    params: dict[int, SamplingParams]
    modalities: list[str] | None = None
    stream: Any = None  # the caller-side RequestStream outputs are delivered to
    enqueued_at: float = 0.0
    source: Any = None  # the caller's input (a RequestInput: chat messages, parts, text)


class AbortRequest(EngineMessage):
    request_ids: list[str]
    reason: str = "abort"
    rpc_key: tuple[str, str] | None = None


@dataclass(frozen=True)
class RpcCall:
    """One control RPC, passed whole from the caller's ``collective_rpc`` to every replica:
    ``method(*args, **kwargs)`` on every live replica of the stages ``stage_ids`` (all of them
    when None), each call bounded by ``timeout`` seconds (None: no bound)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    stage_ids: list[int] | None = None
    timeout: float | None = None


class CollectiveRpc(EngineMessage):
    rpc_key: tuple[str, str]
    call: RpcCall


class Shutdown(EngineMessage):
    pass
