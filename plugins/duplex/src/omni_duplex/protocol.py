"""Commands (client → session, one-way, applied in caller order) and events (session → client).

Event types use the OpenAI Realtime names; the wire codec (:mod:`omni_duplex.realtime`) only adds
ids and base64. Audio in events is pcm16 bytes at :data:`~omni_duplex.config.WIRE_SAMPLE_RATE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_duplex.config import WIRE_SAMPLE_RATE


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    event_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendAudio(Command):
    audio: bytes  # pcm16 little-endian mono
    sample_rate_hz: int = WIRE_SAMPLE_RATE


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendText(Command):
    """Typed input. ``commit``: append and commit it as one turn (``conversation.item.create``),
    admitted or refused as a whole."""

    text: str
    commit: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit(Command):
    create_response: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateResponse(Command):
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResponse(Command):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearInput(Command):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateItem(Command):
    """``conversation.item.truncate``: the user heard only ``audio_end_ms`` of an assistant
    reply; the rest of its text is cut from the history the model sees."""

    item_id: str
    content_index: int = 0
    audio_end_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput(Command):
    """``conversation.item.create`` of a ``function_call_output``: the result of the call
    ``call_id`` (:mod:`omni_duplex.tools`)."""

    call_id: str
    output: str
    item_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateSession(Command):
    session: dict[str, Any] = field(default_factory=dict)


# --- events -------------------------------------------------------------------------------------
SESSION_CREATED = "session.created"
SESSION_UPDATED = "session.updated"
SESSION_CLOSED = "session.closed"
SESSION_EXPIRED = "session.expired"
SPEECH_STARTED = "input_audio_buffer.speech_started"
SPEECH_STOPPED = "input_audio_buffer.speech_stopped"
INPUT_COMMITTED = "input_audio_buffer.committed"
INPUT_CLEARED = "input_audio_buffer.cleared"
RESPONSE_CREATED = "response.created"
TEXT_DELTA = "response.output_text.delta"
AUDIO_DELTA = "response.output_audio.delta"
RESPONSE_DONE = "response.done"
ITEM_DELETED = "conversation.item.deleted"  # dropped from the history (max_history_*)
ITEM_TRUNCATED = "conversation.item.truncated"
ITEM_ADDED = "conversation.item.added"
ITEM_DONE = "conversation.item.done"
# a response's function calls (omni_duplex.tools)
OUTPUT_ITEM_ADDED = "response.output_item.added"
OUTPUT_ITEM_DONE = "response.output_item.done"
FUNCTION_CALL_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
FUNCTION_CALL_ARGUMENTS_DONE = "response.function_call_arguments.done"
ERROR = "error"

TERMINAL_EVENTS = frozenset({SESSION_CLOSED, SESSION_EXPIRED})


@dataclass(frozen=True, slots=True)
class DuplexEvent:
    """One event of a session. ``epoch`` advances at every cancelled response; ``t`` is the
    engine's ``time.monotonic()`` at emission."""

    type: str
    session_id: str
    epoch: int
    data: dict[str, Any]
    t: float

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENTS
