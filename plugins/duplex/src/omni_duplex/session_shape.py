"""The Realtime ``session`` object on the wire: OpenAI's GA shape, and omni-duplex's flat one.

``session.update`` takes either (parsed by :mod:`omni_duplex.client_events`): GA's
``session.type`` (``realtime``), ``session.audio.input.format`` /
``session.audio.input.turn_detection``, ``session.audio.output.format`` /
``session.audio.output.voice``, or the flat ``turn_detection`` and ``voice``. ``session.created``
and ``session.updated`` carry both (:func:`wire_session`): GA's fields, as the ``openai``
package's ``RealtimeSessionCreateRequest`` reads them, and beside them the flat ones that clients
written against the earlier shape read (``turn_detection``, ``input_sample_rate_hz``, ``voice``:
extra fields, which OpenAI's models keep).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from omni_duplex.config import WIRE_SAMPLE_RATE
from omni_duplex.errors import DuplexError

if TYPE_CHECKING:
    from omni_duplex.config import SessionConfig
    from omni_duplex.model import DuplexModel

PCM = {"type": "audio/pcm", "rate": WIRE_SAMPLE_RATE}  # the only format, in and out


def wire_session(session_id: str, public: dict[str, Any]) -> dict[str, Any]:
    """A session's config (:meth:`SessionConfig.public`) as the ``session`` of
    ``session.created``/``session.updated``: GA's fields and the flat ones."""
    td = public.get("turn_detection")
    session: dict[str, Any] = {
        "id": session_id,
        "object": "realtime.session",
        "type": "realtime",
        **public,
    }
    if session.get("max_output_tokens") is None:
        session["max_output_tokens"] = "inf"  # GA's word for no limit
    session["audio"] = {
        "input": {"format": dict(PCM), "turn_detection": copy.deepcopy(td)},
        "output": {"format": dict(PCM), "voice": public.get("voice")},
    }
    return session


def check_voice(model: DuplexModel, config: SessionConfig) -> None:
    """A session's ``voice`` must be one of the model plug's ``voices`` (None: its default)."""
    voice = config.voice
    if voice is None or voice in model.voices:
        return
    have = (
        f"the voices {', '.join(model.voices)}"
        if model.voices
        else "one voice and none to choose (send null or leave it out)"
    )
    raise DuplexError(
        "invalid_session_config",
        f"'session.audio.output.voice': {voice!r}: model '{model.name}' has {have}",
    )
