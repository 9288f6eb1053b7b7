"""The OpenAI Realtime (GA) wire codec for the supported subset: pure functions, no I/O.

Client events → commands (:func:`commands_from_client`); session events → server events
(:func:`to_server_event`). Audio on the wire is base64 pcm16 at 24 kHz.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

from omni_duplex import protocol as P
from omni_duplex.config import WIRE_SAMPLE_RATE
from omni_duplex.errors import DuplexError, error_type


def _event_id() -> str:
    return f"event_{uuid.uuid4().hex[:20]}"


def session_changes(session: dict[str, Any]) -> dict[str, Any]:
    """A Realtime ``session`` object → :class:`~omni_duplex.config.SessionConfig` fields."""
    if not isinstance(session, dict):
        raise DuplexError("invalid_session_config", "'session' must be an object")
    changes: dict[str, Any] = {}
    if "instructions" in session:
        changes["instructions"] = session["instructions"]
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is not None:
        changes["output_modalities"] = modalities
    if "max_output_tokens" in session:
        limit = session["max_output_tokens"]
        changes["max_output_tokens"] = None if limit == "inf" else limit
    audio_in = (session.get("audio") or {}).get("input") or {}
    fmt = audio_in.get("format")
    if isinstance(fmt, dict):
        rate = fmt.get("rate", WIRE_SAMPLE_RATE)
        if fmt.get("type", "audio/pcm") != "audio/pcm" or rate != WIRE_SAMPLE_RATE:
            raise DuplexError(
                "invalid_session_config", f"input audio must be audio/pcm at {WIRE_SAMPLE_RATE} Hz"
            )
    for source in (session, audio_in):
        if "turn_detection" in source:
            td = source["turn_detection"]
            if isinstance(td, dict):
                if td.get("type", "server_vad") != "server_vad":
                    raise DuplexError(
                        "unsupported_turn_detection",
                        f"turn_detection type {td.get('type')!r}: only 'server_vad' or null",
                    )
                td = {k: v for k, v in td.items() if k != "idle_timeout_ms"}
            changes["turn_detection"] = td
    return changes


def commands_from_client(event: Any) -> list[P.Command]:
    """One client event → the commands it means (raises DuplexError for bad events)."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise DuplexError("invalid_event", "a client event must be an object with a 'type'")
    kind, eid = event["type"], event.get("event_id")
    if kind == "input_audio_buffer.append":
        try:
            audio = base64.b64decode(event.get("audio", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise DuplexError("invalid_audio", "'audio' must be base64 pcm16") from None
        return [P.AppendAudio(audio=audio, sample_rate_hz=WIRE_SAMPLE_RATE, event_id=eid)]
    if kind == "input_audio_buffer.commit":
        return [P.Commit(event_id=eid)]
    if kind == "input_audio_buffer.clear":
        return [P.ClearInput(event_id=eid)]
    if kind == "response.create":
        return [P.CreateResponse(options=event.get("response") or {}, event_id=eid)]
    if kind == "response.cancel":
        return [P.CancelResponse(event_id=eid)]
    if kind == "session.update":
        return [P.UpdateSession(session=session_changes(event.get("session") or {}), event_id=eid)]
    if kind == "conversation.item.create":
        item = event.get("item") or {}
        texts = [
            c.get("text", "")
            for c in item.get("content") or []
            if isinstance(c, dict) and c.get("type") in ("input_text", "text")
        ]
        if item.get("role", "user") != "user" or not texts:
            raise DuplexError("invalid_event", "only user messages with input_text are supported")
        return [P.AppendText(text=" ".join(texts), event_id=eid), P.Commit(event_id=eid)]
    raise DuplexError("unknown_event", f"unsupported client event type '{kind}'")


def error_event(
    code: str, message: str, event_id: Any = None, retryable: bool = False
) -> dict[str, Any]:
    return {
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


def to_server_event(event: P.DuplexEvent) -> dict[str, Any]:
    d = event.data
    out: dict[str, Any] = {"type": event.type, "event_id": _event_id()}
    if event.type in (P.SESSION_CREATED, P.SESSION_UPDATED):
        out["session"] = {
            "id": event.session_id,
            "object": "realtime.session",
            "type": "realtime",
            **d["session"],
        }
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
        out["response"] = {
            "id": d["response_id"],
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [
                {"id": d["item_id"], "type": "message", "role": "assistant", "content": content}
            ],
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
