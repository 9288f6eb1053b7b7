"""Client events of ``/v1/realtime``, parsed in one place: a frame → the commands it means, or one
:class:`ClientEventError` naming what is wrong and where (the transport answers it with one
``error`` event and keeps the socket).

Top-level fields are checked strictly (an unknown one is an error, as OpenAI's Realtime API does);
nested objects (``session``, ``item``, content parts) may carry fields this server ignores.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from omni_duplex import protocol as P
from omni_duplex.config import WIRE_SAMPLE_RATE
from omni_duplex.errors import DuplexError


class ClientEventError(DuplexError):
    """A malformed client event; ``event_id`` is the client's, when it sent a usable one."""

    def __init__(self, code: str, message: str, event_id: str | None = None) -> None:
        super().__init__(code, message)
        self.event_id = event_id


# --- the event models -----------------------------------------------------------------------
class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    event_id: StrictStr | None = None


class _Nested(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Format(_Nested):
    type: StrictStr = "audio/pcm"
    rate: int = WIRE_SAMPLE_RATE


class _AudioInput(_Nested):
    format: _Format | None = None
    turn_detection: dict[str, Any] | None = None


class _VoiceId(_Nested):
    id: StrictStr  # GA's custom voice reference: the voice's name here


class _AudioOutput(_Nested):
    format: _Format | None = None
    voice: StrictStr | _VoiceId | None = None


class _Audio(_Nested):
    input: _AudioInput | None = None
    output: _AudioOutput | None = None


class _Session(_Nested):
    """GA's ``session`` (``type``, ``audio.input``/``audio.output``) or the flat one
    (``turn_detection``, ``voice``): both are read (omni_duplex.session_shape)."""

    type: StrictStr | None = None
    voice: StrictStr | None = None
    instructions: Any = None
    output_modalities: Any = None
    modalities: Any = None
    max_output_tokens: Any = None
    turn_detection: dict[str, Any] | None = None
    audio: _Audio | None = None
    tools: list[Any] | None = None  # checked by the session (omni_duplex.tools)
    tool_choice: StrictStr | dict[str, Any] | None = None


class _ContentPart(_Nested):
    type: StrictStr
    text: StrictStr | None = None


class _Item(_Nested):
    type: Literal["message", "function_call_output"] = "message"
    id: StrictStr | None = None
    role: StrictStr = "user"
    content: list[_ContentPart] = Field(default_factory=list)
    call_id: StrictStr | None = None  # function_call_output: the call it answers
    output: StrictStr | None = None  # function_call_output: the result (free text)


class _Append(_Event):
    type: Literal["input_audio_buffer.append"]
    audio: StrictStr


class _Plain(_Event):
    type: Literal["input_audio_buffer.commit", "input_audio_buffer.clear", "response.cancel"]
    response_id: StrictStr | None = None  # response.cancel may name the response


class _CreateResponse(_Event):
    type: Literal["response.create"]
    response: dict[str, Any] | None = None


class _UpdateSession(_Event):
    type: Literal["session.update"]
    session: _Session = Field(default_factory=_Session)


class _CreateItem(_Event):
    type: Literal["conversation.item.create"]
    item: _Item
    previous_item_id: StrictStr | None = None


class _TruncateItem(_Event):
    type: Literal["conversation.item.truncate"]
    item_id: StrictStr
    content_index: StrictInt = Field(default=0, ge=0)
    audio_end_ms: StrictInt = Field(ge=0)


_MODELS: dict[str, type[_Event]] = {
    "input_audio_buffer.append": _Append,
    "input_audio_buffer.commit": _Plain,
    "input_audio_buffer.clear": _Plain,
    "response.cancel": _Plain,
    "response.create": _CreateResponse,
    "session.update": _UpdateSession,
    "conversation.item.create": _CreateItem,
    "conversation.item.truncate": _TruncateItem,
}


# --- parsing --------------------------------------------------------------------------------
def decode_frame(frame: str | bytes, max_bytes: int) -> list[P.Command]:
    """One WebSocket frame → commands. CPU-bound for large frames (JSON, base64): call it off the
    event loop for those."""
    if isinstance(frame, bytes):
        raise ClientEventError(
            "invalid_event", "binary frames are not supported: send each client event as JSON text"
        )
    if len(frame) > max_bytes:  # characters ≤ bytes: a cheap first check
        _too_large(len(frame), max_bytes)
    size = len(frame.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        _too_large(size, max_bytes)
    try:
        event = json.loads(frame)
    except RecursionError:
        raise ClientEventError("invalid_event", "the event is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise ClientEventError("invalid_event", f"the event is not valid JSON: {exc}") from None
    return commands_from_event(event)


def _too_large(size: int, max_bytes: int) -> None:
    raise ClientEventError(
        "event_too_large", f"the event has {size} bytes; the limit is {max_bytes} (max_event_bytes)"
    )


def commands_from_event(event: Any) -> list[P.Command]:
    """One decoded client event → the commands it means (raises :class:`ClientEventError`)."""
    if not isinstance(event, dict):
        raise ClientEventError(
            "invalid_event", f"a client event must be a JSON object, not {type(event).__name__}"
        )
    eid = event.get("event_id")
    eid = eid if isinstance(eid, str) else None
    kind = event.get("type")
    if not isinstance(kind, str):
        what = "missing" if kind is None else f"a {type(kind).__name__}, not a string"
        raise ClientEventError("invalid_event", f"'type': {what}", eid)
    model = _MODELS.get(kind)
    if model is None:
        raise ClientEventError("unknown_event", f"unsupported client event type '{kind}'", eid)
    try:
        parsed = model.model_validate(event)
    except ValidationError as exc:
        raise ClientEventError("invalid_event", f"{kind}: {_problems(exc)}", eid) from None
    except RecursionError:
        raise ClientEventError("invalid_event", f"{kind}: nested too deeply", eid) from None
    return _commands(parsed, eid)


def _problems(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "event"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"'{loc}': {msg}")
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _commands(ev: _Event, eid: str | None) -> list[P.Command]:
    if isinstance(ev, _Append):
        try:
            audio = base64.b64decode(ev.audio, validate=True)
        except (binascii.Error, ValueError):
            raise ClientEventError(
                "invalid_audio", "'audio': not valid base64 (pcm16 at 24 kHz)", eid
            ) from None
        if len(audio) % 2:
            raise ClientEventError(
                "invalid_audio", "'audio': pcm16 needs an even number of bytes", eid
            )
        return [P.AppendAudio(audio=audio, sample_rate_hz=WIRE_SAMPLE_RATE, event_id=eid)]
    if isinstance(ev, _Plain):
        if ev.type == "input_audio_buffer.commit":
            return [P.Commit(event_id=eid)]
        if ev.type == "input_audio_buffer.clear":
            return [P.ClearInput(event_id=eid)]
        return [P.CancelResponse(event_id=eid)]
    if isinstance(ev, _CreateResponse):
        return [P.CreateResponse(options=ev.response or {}, event_id=eid)]
    if isinstance(ev, _UpdateSession):
        return [P.UpdateSession(session=_session_changes(ev.session, eid), event_id=eid)]
    if isinstance(ev, _TruncateItem):
        return [
            P.TruncateItem(
                item_id=ev.item_id,
                content_index=ev.content_index,
                audio_end_ms=ev.audio_end_ms,
                event_id=eid,
            )
        ]
    assert isinstance(ev, _CreateItem)
    item = ev.item
    if item.type == "function_call_output":
        for name in ("call_id", "output"):
            if getattr(item, name) is None:
                raise ClientEventError(
                    "invalid_event", f"'item.{name}': a function_call_output needs it", eid
                )
        assert item.call_id is not None and item.output is not None
        return [
            P.ToolOutput(call_id=item.call_id, output=item.output, item_id=item.id, event_id=eid)
        ]
    texts = [c.text for c in item.content if c.type in ("input_text", "text")]
    if item.role != "user" or not texts or any(t is None for t in texts):
        raise ClientEventError(
            "invalid_event",
            "'item': only user messages with input_text content (a 'text' string) are supported",
            eid,
        )
    return [
        P.AppendText(text=" ".join(t for t in texts if t is not None), commit=True, event_id=eid)
    ]


def session_changes(session: Any) -> dict[str, Any]:
    """A Realtime ``session`` object (decoded JSON) → SessionConfig fields."""
    try:
        parsed = _Session.model_validate(session)
    except ValidationError as exc:
        raise ClientEventError("invalid_session_config", f"session: {_problems(exc)}") from None
    return _session_changes(parsed, None)


def _session_changes(session: _Session, eid: str | None) -> dict[str, Any]:
    """A Realtime ``session`` object → :class:`~omni_duplex.config.SessionConfig` fields (their
    values are validated by the session, which answers a bad one with one ``error``)."""
    given = session.model_fields_set
    changes: dict[str, Any] = {}
    if "instructions" in given:
        changes["instructions"] = session.instructions
    modalities = session.output_modalities if "output_modalities" in given else session.modalities
    if modalities is not None:
        changes["output_modalities"] = modalities
    for name in ("tools", "tool_choice"):
        if name in given:
            value = getattr(session, name)
            changes[name] = ([] if name == "tools" else "auto") if value is None else value
    if "max_output_tokens" in given:
        limit = session.max_output_tokens
        changes["max_output_tokens"] = None if limit == "inf" else limit
    if session.type is not None and session.type != "realtime":
        raise ClientEventError(
            "invalid_session_config",
            f"'session.type' {session.type!r}: only 'realtime' sessions (no transcription ones)",
            eid,
        )
    audio_in = session.audio.input if session.audio is not None else None
    audio_out = session.audio.output if session.audio is not None else None
    for where, part in (("input", audio_in), ("output", audio_out)):
        fmt = part.format if part is not None else None
        if fmt is not None and (fmt.type != "audio/pcm" or fmt.rate != WIRE_SAMPLE_RATE):
            raise ClientEventError(
                "invalid_session_config",
                f"'session.audio.{where}.format': must be audio/pcm at {WIRE_SAMPLE_RATE} Hz",
                eid,
            )
    if "voice" in given:
        changes["voice"] = session.voice
    if audio_out is not None and "voice" in audio_out.model_fields_set:  # GA's place wins
        voice = audio_out.voice
        changes["voice"] = voice.id if isinstance(voice, _VoiceId) else voice
    for source in (session, audio_in):
        if source is not None and "turn_detection" in source.model_fields_set:
            td = source.turn_detection
            if td is not None:
                if td.get("type", "server_vad") != "server_vad":
                    raise ClientEventError(
                        "unsupported_turn_detection",
                        f"'turn_detection.type' {td.get('type')!r}: only 'server_vad' or null",
                        eid,
                    )
                td = {k: v for k, v in td.items() if k != "idle_timeout_ms"}
            changes["turn_detection"] = td
    return changes
