"""A streamed chat asking for audio asks the pipeline's audio stage for streamed audio: the
generic ``extra[AUDIO_OPTIONS]["stream"]`` (omni_core.media) in every stage's params; a
non-streamed one, or one without audio, does not (whole-utterance audio stays the default)."""

from __future__ import annotations

from omni_core.media import AUDIO_OPTIONS
from omni_core.serve.protocol import ChatCompletionRequest

CHAT = [{"role": "user", "content": "hi"}]


def extra(**body):
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": CHAT, **body}
    ).request_extra()


def test_streamed_audio_chat_sets_the_generic_option():
    assert extra(stream=True, modalities=["text", "audio"]) == {AUDIO_OPTIONS: {"stream": True}}
    assert extra(
        stream=True, modalities=["audio"], audio={"voice": "Ethan", "format": "pcm16"}
    ) == {
        "voice": "Ethan",
        AUDIO_OPTIONS: {"stream": True},
    }


def test_whole_audio_or_text_leaves_it_unset():
    assert extra(modalities=["text", "audio"]) is None
    assert extra(modalities=["audio"], audio={"voice": "Ethan", "format": "wav"}) == {
        "voice": "Ethan"
    }
    assert extra(stream=True) is None
    assert extra(stream=True, modalities=["text"]) is None
