"""Audio options a family's vocoder stage reads from a request: whether it asks for streamed
audio (the generic ``extra[AUDIO_OPTIONS]["stream"]`` that ``omni serve`` sets for a streamed chat
with audio out, or the stage's own ``extra["audio_stream"]``)."""

from __future__ import annotations

from typing import Any

from omni_core.errors import RequestError
from omni_core.media import AUDIO_OPTIONS

__all__ = ["audio_streamed"]


def audio_streamed(extra: dict[str, Any], stage: str = "vocoder") -> bool:
    """Whether a request asks for streamed audio: the generic audio option
    ``extra[AUDIO_OPTIONS]["stream"]`` (:mod:`omni_core.media`), or the stage's own
    ``extra["audio_stream"]``. A value of the wrong type is a 400 naming the parameter;
    ``stage`` names the stage in the errors."""
    generic = extra.get(AUDIO_OPTIONS, {})
    if not isinstance(generic, dict):
        raise RequestError(
            f"{stage}: sampling_params.extra.{AUDIO_OPTIONS} must be an object, not {generic!r}",
            param=AUDIO_OPTIONS,
        )
    for name, value in (
        (f"{AUDIO_OPTIONS}.stream", generic.get("stream", False)),
        ("audio_stream", extra.get("audio_stream", False)),
    ):
        if not isinstance(value, bool):
            raise RequestError(
                f"{stage}: sampling_params.extra.{name} must be true or false, not {value!r}",
                param=name,
            )
    return bool(generic.get("stream", False) or extra.get("audio_stream", False))
