"""``omni_core.testing.speech.audio_deltas`` (the speech plugins' serve tests read their streams
with it): audio deltas as objects or dicts, the kinds in arrival order, the decoded bytes."""

from __future__ import annotations

import base64
from types import SimpleNamespace

from omni_core.testing.speech import audio_deltas


def chunk(audio=None, choices=True):
    delta = SimpleNamespace(audio=audio)
    return SimpleNamespace(choices=[SimpleNamespace(delta=delta)] if choices else [])


def test_kinds_in_arrival_order_and_the_decoded_audio():
    b64 = base64.b64encode
    stream = [
        chunk({"transcript": "Hel"}),
        chunk(choices=False),  # a usage chunk
        chunk(SimpleNamespace(data=b64(b"\x01\x02").decode(), transcript=None)),
        chunk(None),
        chunk({"data": b64(b"\x03\x04").decode(), "transcript": "lo"}),
        chunk(SimpleNamespace(transcript="!")),  # no data attribute at all
    ]
    assert audio_deltas(stream) == (["text", "audio", "audio", "text", "text"], b"\x01\x02\x03\x04")
