"""The ``qwen3-omni`` pipeline (vLLM thinker → talker + code predictor → code2wav, stream edges)
against transformers' ``generate(return_audio=True)`` on the same tiny checkpoint.

Greedy thinker and talker: the thinker's ids, the talker's codes of every code group and the
waveform equal transformers'. transformers' ``talker_max_new_tokens`` is ``FRAMES + 1`` (its last
first-code never gets residual codes; the tiny talker never says its eos). Waveform: max abs
within ``WAVE_TOLERANCE`` (measured: 0, bitwise: code2wav gets the same codes and
``chunked_decode(chunk_size=300)`` is one decode under 300 frames). A streamed request (the
generic audio option ``extra[AUDIO_OPTIONS]["stream"]``) gets its audio in several chunks that
join into the whole decode within 1e-6 (left context 25 >= the tiny receptive field, 14).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from omni_qwen3.pipelines import omni_pipeline
from qwen3_helpers import AUDIO_IMAGE_CHAT, image, speech
from qwen_prompts import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, hf_inputs, sine

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.extend import AUDIO_OPTIONS
from omni_core.media import AudioChunk
from omni_core.plugin.hooks import PluginHost

# the module's engine starts vLLM and two torch stages (minutes on the loaded 2 cores)
pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

THINKER_TOKENS = 8
FRAMES = 16  # > the code2wav stage's 12-frame streamed chunk: two chunks
WAVE_TOLERANCE = 1e-6
CASES = {
    "text": (TEXT_CHAT, {}),
    "audio": (AUDIO_CHAT, {"audio": [sine()]}),
    "image": (IMAGE_CHAT, {"images": [image()]}),
    # the talker's rope positions read the audio's length (transformers' reference given the
    # thinker's audio config: qwen3_helpers.speech)
    "audio+image": (AUDIO_IMAGE_CHAT, {"audio": [sine()], "images": [image()]}),
}


@pytest.fixture(scope="module")
def engine(tiny_qwen3, qwen3_cache):
    settings = OmniSettings(cache_dir=qwen3_cache, startup_timeout_s=600.0)
    engine = AsyncOmniEngine(
        omni_pipeline(), settings=settings, plugins=PluginHost.create(settings)
    )
    yield engine
    engine.shutdown()


def params(voice: str, stream: bool = False) -> dict[str, Any]:
    return {
        "thinker": {"max_tokens": THINKER_TOKENS, "temperature": 0.0},
        "talker": {
            "temperature": 0.0,
            "repetition_penalty": 1.05,
            "max_tokens": FRAMES,
            "extra": {"voice": voice},
        },
        "code2wav": {"extra": {AUDIO_OPTIONS: {"stream": stream}}},
    }


def speak(engine: AsyncOmniEngine, prompt: Any, sampling: dict[str, Any]) -> list[Any]:
    async def go() -> list[Any]:
        return [out async for out in engine.generate(prompt, sampling_params=sampling)]

    return asyncio.run(go())


def prompt_of(hf: Any, chat: list[dict[str, Any]], media: dict[str, Any]) -> dict[str, Any]:
    text, _ = hf_inputs(hf, chat, **media)
    data: dict[str, Any] = {}
    if "audio" in media:
        data["audio"] = (media["audio"][0], SAMPLE_RATE)
    if "images" in media:
        data["image"] = media["images"][0]
    return {"prompt": text, "multi_modal_data": data} if data else {"prompt": text}


def audio_of(outs: list[Any]) -> tuple[list[int], np.ndarray, int]:
    chunks = [o for o in outs if o.stage_name == "code2wav"]
    for o in chunks:
        assert isinstance(o.payload, AudioChunk) and o.payload.sample_rate == 24000
    codes = [c for o in chunks for c in o.token_ids]
    wave = np.concatenate([o.payload.samples for o in chunks])
    return codes, wave, len(chunks)


@pytest.mark.parametrize(
    ("case", "voice"),
    [("text", "Ethan"), ("audio", "Chelsie"), ("image", "aiden"), ("audio+image", "Ethan")],
)
def test_the_pipeline_speaks_as_transformers_generate(engine, hf3, case, voice):
    chat, media = CASES[case]
    ref = speech(hf3, chat, THINKER_TOKENS, FRAMES, voice=voice, **media)
    outs = speak(engine, prompt_of(hf3, chat, media), params(voice))
    last = outs[-1]
    assert last.finished and last.error is None, last
    assert [t for o in outs if o.stage_name == "thinker" for t in o.token_ids] == ref["reply"]
    codes, wave, _ = audio_of(outs)
    assert len(codes) == 4 * FRAMES and codes == ref["codes"]  # every group of every frame
    assert wave.dtype == np.float32 and wave.shape == ref["wave"].shape == (FRAMES * 1920 - 555,)
    assert np.abs(wave - ref["wave"]).max() <= WAVE_TOLERANCE


def test_streamed_audio_comes_in_chunks_equal_to_the_whole_decode(engine, hf3):
    chat, media = CASES["text"]
    prompt = prompt_of(hf3, chat, media)
    whole = audio_of(speak(engine, prompt, params("Ethan")))
    outs = speak(engine, prompt, params("Ethan", stream=True))
    assert outs[-1].error is None, outs[-1]
    codes, wave, chunks = audio_of(outs)
    assert chunks >= 2 and codes == whole[0]
    assert wave.shape == whole[1].shape
    assert np.abs(wave - whole[1]).max() <= 1e-6


def test_an_unknown_voice_is_a_400_naming_the_voices(engine):
    text = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    outs = speak(engine, {"prompt": text}, params("Nobody"))
    last = outs[-1]
    assert last.finished and last.finish_reason == "error"
    assert last.error.status_code == 400
    assert "Nobody" in last.error.message and "aiden, chelsie, ethan" in last.error.message
