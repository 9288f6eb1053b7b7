"""The talker equals transformers' talker; the whole pipeline speaks as ``generate()`` does.

Reference: ``Qwen2_5OmniForConditionalGeneration.generate`` with audio output on the tiny
checkpoint, float32, the thinker greedy (``talker_helpers.hf_speech`` records the thinker's ids
and hidden states, the talker's codes, logits and 3D positions), with the talker's attention mask
kept: transformers 5.19's ``generate`` drops an all-ones mask, and without one the talker's
``forward`` skips its 3D positions and the codec embeddings of its prompt (talker_helpers).

* Given the same thinker output (transformers' own ids and hidden states, handed over whole as an
  ``on_finish`` edge does and token by token as a ``stream`` edge does), the talker engine's codes
  **equal** transformers' talker's: greedy (``talker_do_sample=False``) for a text, an audio + text
  and an image + text prompt, a reply whose eos comes early (transformers' per-row rewrite), and
  seeded sampling with transformers' talker defaults (the same draws).
* Through the pipeline ``qwen2.5-omni`` (vLLM thinker with hidden states → ``stream`` edge →
  talker → token2wav, one engine for the module), greedy thinker and talker: the thinker's ids
  equal transformers', the talker's codes **equal** transformers' (the vLLM thinker's states are
  within 1e-4 of transformers', docs/models.md; no code flips here), and the waveform — float32,
  24 kHz, 480 samples per code — equals ``generate()``'s within 1e-3 of its peak, max abs, for
  the same seed (token2wav's noise; the greedy stages draw nothing). An unknown voice is a 400
  naming the voices, and the engine keeps serving.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from omni_qwen.pipelines import omni_pipeline
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, hf_inputs, image, sine
from talker_helpers import hf_speech, talker_forward, thinker_chunks, whole_input

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.media import AudioChunk
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

THINKER_TOKENS = 12
TALKER_TOKENS = 40  # the tiny talker never stops by itself
# max abs, relative to the reference's peak (~0.44 on tiny v2; v1's random BigVGAN peaked at ~4e-7,
# where an absolute 1e-3 would accept any waveform); measured: bitwise equal
WAVE_TOLERANCE = 1e-3
LOGIT_TOLERANCE = 1e-5  # max abs over every step's logits, float32, same inputs (measured: 0)
SEED = 0
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05, max_tokens=TALKER_TOKENS)

AUDIO_IMAGE_CHAT = [
    {
        "role": "user",
        "content": [{"type": "audio"}, {"type": "image"}, {"type": "text", "text": "And this?"}],
    }
]
CASES = {
    "text": (TEXT_CHAT, {}, []),
    "audio": (AUDIO_CHAT, {"audio": [sine()]}, []),
    "image": (IMAGE_CHAT, {"images": [image()]}, [(56, 56)]),
    "audio+image": (AUDIO_IMAGE_CHAT, {"audio": [sine()], "images": [image()]}, [(56, 56)]),
}


@pytest.fixture(scope="module")
def talker(tiny_qwen):
    """The talker engine in this process (what the stage process builds)."""
    from omni_qwen.talker import build

    return build({"model": str(tiny_qwen), "threads": 1, "options": {}})


def drive(engine: Any, chunks: list[dict[str, Any]], params: SamplingParams) -> tuple[Any, ...]:
    """Feed ``chunks`` (one: a whole input; several: streamed, the next one whenever the
    talker waits, and every other step anyway) and step until the request ends."""
    rid = f"r{id(chunks)}"
    streaming = len(chunks) > 1
    request = SimpleNamespace(
        request_id=rid,
        prompt=chunks[0],
        params=params,
        streaming_input=streaming,
        stream_outputs=True,
    )
    engine.add(request)
    codes: list[int] = []
    sent, steps = 1, 0
    while True:
        if sent < len(chunks) and (not engine.has_work() or steps % 2):
            engine.add_input(rid, chunks[sent], sent == len(chunks) - 1)
            sent += 1
            continue
        assert engine.has_work()
        steps += 1
        for out in engine.step():
            assert out.error is None, out.error
            codes += out.token_ids
            if out.finished:
                return codes, out.finish_reason


@pytest.mark.parametrize("case", list(CASES))
def test_talker_codes_equal_transformers_given_the_same_thinker_output(hf, talker, case):
    """Codes equal; each step's logits within LOGIT_TOLERANCE; the 3D rope positions (an
    image's tokens take its grid's) equal. The tiny talker's codes hardly depend on its
    positions or on the codec embeddings of its prompt (``generate()`` as installed, which
    drops both, gives the same codes here but logits up to ~0.16 away): the logits tell."""
    chat, media, sizes = CASES[case]
    args = (hf, chat, THINKER_TOKENS, TALKER_TOKENS)
    speech = hf_speech(*args, do_sample=False, waveform=False, **media)
    assert len(speech.codes) == TALKER_TOKENS
    seen = []
    rope_index = talker.talker.get_rope_index

    def positions(*args: Any, **kwargs: Any) -> Any:
        seen.append(rope_index(*args, **kwargs)[0])
        return rope_index(*args, **kwargs)

    talker.talker.get_rope_index = positions
    try:
        with talker_forward(talker.talker) as logits:
            whole = drive(talker, [whole_input(speech, sizes)], GREEDY)
        streamed = drive(talker, thinker_chunks(speech, sizes), GREEDY)
    finally:
        del talker.talker.get_rope_index
    assert whole == streamed == (speech.codes, "length")
    assert len(logits) == TALKER_TOKENS
    for ours, theirs in zip(logits, speech.logits, strict=False):
        assert (ours - theirs).abs().max() <= LOGIT_TOLERANCE
    assert len(seen) == 2 and all(p.tolist() == speech.positions.tolist() for p in seen)
    if sizes:  # the image's 2x2 grid: not plain positions
        assert speech.positions[1].tolist() != speech.positions[0].tolist()


def test_an_early_thinker_eos_ends_the_text_the_talker_reads(hf, talker):
    """transformers puts the tts eos after the reply's first eos and pads after it."""
    args = (hf, TEXT_CHAT, THINKER_TOKENS, TALKER_TOKENS)
    speech = hf_speech(*args, do_sample=False, waveform=False, eos_at=4)
    late = hf_speech(*args, do_sample=False, waveform=False)
    assert speech.codes != late.codes  # the rewrite changed what the talker read
    assert drive(talker, thinker_chunks(speech), GREEDY) == (speech.codes, "length")


def test_seeded_sampling_draws_as_transformers(hf, talker):
    """transformers' talker defaults (temperature 0.9, top-k 40, top-p 0.8, repetition penalty
    1.05) after ``torch.manual_seed(7)``, voice Ethan; the stage samples from its own generator
    seeded 7. Another seed, or Chelsie's voice, says something else."""
    speech = hf_speech(
        hf,
        AUDIO_CHAT,
        THINKER_TOKENS,
        TALKER_TOKENS,
        seed=7,
        speaker="Ethan",
        waveform=False,
        audio=[sine()],
    )
    params = SamplingParams(
        temperature=0.9,
        top_k=40,
        top_p=0.8,
        repetition_penalty=1.05,
        max_tokens=TALKER_TOKENS,
        seed=7,
        extra={"voice": "Ethan"},
    )
    assert drive(talker, thinker_chunks(speech), params) == (speech.codes, "length")
    for other in (params.merged({"seed": 8}), params.merged({"extra": {"voice": "Chelsie"}})):
        assert drive(talker, thinker_chunks(speech), other)[0] != speech.codes


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0)
    plugins = PluginHost.create(settings)
    engine = AsyncOmniEngine(omni_pipeline(), settings=settings, plugins=plugins)
    yield engine
    engine.shutdown()


def stage_params(voice: str) -> dict[str, Any]:
    """Greedy thinker and talker, token2wav seeded; the voice for the talker and token2wav."""
    extra = {"voice": voice}
    return {
        "thinker": {"max_tokens": THINKER_TOKENS, "temperature": 0.0},
        "talker": {
            "temperature": 0.0,
            "repetition_penalty": 1.05,
            "max_tokens": TALKER_TOKENS,
            "extra": extra,
        },
        "token2wav": {"seed": SEED, "extra": extra},
    }


def speak(engine: AsyncOmniEngine, prompt: Any, params: dict[str, Any]) -> list[Any]:
    async def go() -> list[Any]:
        return [out async for out in engine.generate(prompt, sampling_params=params)]

    return asyncio.run(go())


@pytest.mark.parametrize(("case", "voice"), [("text", "Chelsie"), ("audio", "Ethan")])
def test_the_pipeline_speaks_as_transformers_generate(engine, hf, case, voice):
    chat, media, _ = CASES[case]
    speech = hf_speech(
        hf, chat, THINKER_TOKENS, TALKER_TOKENS, seed=SEED, speaker=voice, do_sample=False, **media
    )
    text, _ = hf_inputs(hf, chat, **media)
    prompt: dict[str, Any] = {"prompt": text}
    if media:
        prompt["multi_modal_data"] = {"audio": (media["audio"][0], SAMPLE_RATE)}
    outs = speak(engine, prompt, stage_params(voice))
    last = outs[-1]
    assert last.finished and last.error is None, last
    thinker = [t for o in outs if o.stage_name == "thinker" for t in o.token_ids]
    assert thinker == speech.generated
    (audio,) = [o for o in outs if o.stage_name == "token2wav"]
    assert audio.token_ids == speech.codes  # the talker's codes, as token2wav voiced them
    assert isinstance(audio.payload, AudioChunk) and audio.payload.sample_rate == 24000
    wave = audio.payload.samples
    assert wave.dtype == np.float32 and wave.shape == (480 * TALKER_TOKENS,)
    assert wave.shape == speech.waveform.shape
    peak = np.abs(speech.waveform).max()
    assert peak > 0 and np.abs(wave - speech.waveform).max() <= WAVE_TOLERANCE * peak


def test_an_unknown_voice_is_a_400_naming_the_voices(engine):
    text = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    outs = speak(engine, {"prompt": text}, stage_params("Nobody"))
    last = outs[-1]
    assert last.finished and last.finish_reason == "error"
    assert last.error.status_code == 400
    assert "Nobody" in last.error.message and "Chelsie, Ethan" in last.error.message
    again = speak(engine, {"prompt": text}, stage_params("Chelsie"))
    assert again[-1].error is None and again[-1].stage_name == "token2wav"
