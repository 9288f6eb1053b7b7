"""``POST /v1/audio/speech`` on ``omni serve qwen3-tts-clone`` (x-vector voice clone) with the
official ``openai`` client: ``ref_audio`` as a base64 WAV (``extra_body``, vllm-omni's field)
gives speech whose codes depend on it; a reference over ``OMNI_MAX_AUDIO_SECONDS``, a missing or
unreadable one, and ICL mode without ``ref_text`` are 400s naming the field; with ``ref_text``
(ICL mode) the speech differs from x-vector mode's."""

from __future__ import annotations

import base64
import io

import pytest
from omni_qwen3_tts.pipelines import clone_pipeline

from omni_core.testing.speech import served_openai_client

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def client(tiny_tts, built_model):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMNI_MAX_AUDIO_SECONDS", "2")
        with served_openai_client(clone_pipeline(), built_model.cache) as (client, _):
            yield client


def wav_base64(seconds: float, hz: float) -> str:
    import numpy as np
    import soundfile

    t = np.arange(int(24000 * seconds)) / 24000
    buffer = io.BytesIO()
    soundfile.write(buffer, 0.3 * np.sin(2 * np.pi * hz * t), 24000, format="WAV")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()


def clone(client, ref_audio, **extra):
    return client.audio.speech.create(
        model="qwen3-tts-clone", input="hello world, read the news", voice="alloy",
        response_format="pcm", extra_body={"ref_audio": ref_audio, "seed": 1,
                                            "max_new_tokens": 12, **extra},
    )  # fmt: skip


def test_the_reference_voice_is_cloned(client):
    first = clone(client, wav_base64(1.0, 220))
    assert len(first.content) > 0 and len(first.content) % (2 * 1920) == 0
    assert clone(client, wav_base64(1.0, 220)).content == first.content
    assert clone(client, wav_base64(1.0, 330)).content != first.content
    icl = clone(client, wav_base64(1.0, 220), ref_text="good morning")
    assert len(icl.content) % (2 * 1920) == 0 and icl.content != first.content


@pytest.mark.parametrize(
    ("ref_audio", "extra", "param", "message"),
    [
        ("long", {}, "ref_audio", "OMNI_MAX_AUDIO_SECONDS"),
        ("", {}, "ref_audio", "needs reference audio"),
        ("bm90IGF1ZGlv", {}, "ref_audio", "not base64 audio"),
        ("short", {"x_vector_only_mode": False}, "ref_text", "ICL"),
    ],
)
def test_bad_references_are_400s_naming_the_field(client, ref_audio, extra, param, message):
    import openai

    audio = {"long": wav_base64(3.0, 220), "short": wav_base64(0.5, 220)}.get(ref_audio, ref_audio)
    with pytest.raises(openai.BadRequestError) as info:
        clone(client, audio, **extra)
    assert info.value.body["param"] == param and message in info.value.body["message"]
