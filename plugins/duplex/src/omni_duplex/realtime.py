"""The OpenAI Realtime (GA) wire codec for the supported subset: pure functions, no I/O.

Client events → commands (:func:`commands_from_client`, parsed by
:mod:`omni_duplex.client_events`); session events → server events
(:func:`to_server_event`). Audio on the wire is base64 pcm16 at 24 kHz.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from omni_duplex import client_events
from omni_duplex import protocol as P
from omni_duplex.errors import error_type
from omni_duplex.session_shape import wire_session


def _event_id() -> str:
    return f"event_{uuid.uuid4().hex[:20]}"


def session_changes(session: Any) -> dict[str, Any]:
    """A Realtime ``session`` object → :class:`~omni_duplex.config.SessionConfig` fields."""
    return client_events.session_changes(session)


def commands_from_client(event: Any) -> list[P.Command]:
    """One decoded client event → the commands it means (raises
    :class:`~omni_duplex.client_events.ClientEventError`, a DuplexError, for bad events)."""
    return client_events.commands_from_event(event)


def error_event(
    code: str,
    message: str,
    event_id: Any = None,
    retryable: bool = False,
    *,
    retry_after_s: float | None = None,
) -> dict[str, Any]:
    """An ``error`` server event; ``retry_after_s`` (when known): seconds until a retry may
    succeed, as an HTTP ``Retry-After`` says (an omni-duplex field)."""
    event: dict[str, Any] = {
        "type": "error",
        "event_id": _event_id(),
        "error": {
            "type": error_type(code),
            "code": code,
            "message": message,
            "event_id": event_id,
            "retryable": retryable,
        },
    }
    if retry_after_s is not None:
        event["error"]["retry_after_s"] = retry_after_s
    return event


def to_server_event(event: P.DuplexEvent) -> dict[str, Any]:
    d = event.data
    out: dict[str, Any] = {"type": event.type, "event_id": _event_id()}
    if event.type in (P.SESSION_CREATED, P.SESSION_UPDATED):
        out["session"] = wire_session(event.session_id, d["session"])  # GA's and the flat
        if "capabilities" in d:
            out["session"]["capabilities"] = d["capabilities"]
    elif event.type == P.ERROR:
        return error_event(d["code"], d["message"], d.get("event_id"), d.get("retryable", False))
    elif event.type == P.RESPONSE_CREATED:
        out["response"] = {
            "id": d["response_id"],
            "object": "realtime.response",
            "status": "in_progress",
            "output": [],
        }
    elif event.type == P.RESPONSE_DONE:
        status = d["status"]
        details: dict[str, Any] = {"type": status, "reason": d["reason"]}
        content = [{"type": "output_audio", "transcript": d["text"]}]
        message = {"id": d["item_id"], "type": "message", "role": "assistant", "content": content}
        calls = d.get("calls") or []  # function_call items (omni_duplex.tools)
        spoke = d["text"] or d["audio_ms"] or not calls  # a reply of calls only has no message
        out["response"] = {
            "id": d["response_id"],
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": ([message] if spoke else []) + calls,
            "audio_ms": d["audio_ms"],
        }
    elif event.type in (P.TEXT_DELTA, P.AUDIO_DELTA):
        out.update(
            response_id=d["response_id"], item_id=d["item_id"], output_index=0, content_index=0
        )
        out["delta"] = base64.b64encode(d["audio"]).decode() if "audio" in d else d["delta"]
    else:
        out.update(d)
    out["epoch"] = event.epoch
    return out
