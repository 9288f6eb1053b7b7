"""Messages from the engine (caller threads) to the orchestrator loop.

They cross a thread boundary as Python objects (same process: no serialization). Results of
correlated calls go back through :class:`~omni_core.engine.rpc.RpcRouter` keyed by ``rpc_key``.
"""

from __future__ import annotations

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


class CollectiveRpc(EngineMessage):
    rpc_key: tuple[str, str]
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    stage_ids: list[int] | None = None
    timeout: float | None = None


class Shutdown(EngineMessage):
    pass
