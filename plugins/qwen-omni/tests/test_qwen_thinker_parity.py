"""The Qwen2.5-Omni thinker on omni-core's vLLM stage against transformers, same tiny checkpoint.

Greedy, float32, up to 16 new tokens (both stop at <|im_end|>). Tolerance (vLLM's own HF-comparison
convention): the token ids must be equal; where they diverge, the first differing token of each
side must be in the other side's top-5 logprobs at that position (nothing after it is compared).
Also checked: vLLM's prompt ids (placeholders expanded by vLLM's multimodal processor) equal the
transformers processor's, so the audio / image really reached vLLM.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, greedy, image, sine

from omni_core.testing.parity import GreedyParity, pipeline_engine

NEW_TOKENS = 16
TOP_K = 5
AUDIO_TOKEN, IMAGE_TOKEN = 4003, 4012


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    with pipeline_engine("qwen2.5-omni-thinker", qwen_cache) as engine:
        yield engine


PARITY = GreedyParity(greedy, NEW_TOKENS, TOP_K)


def test_text_prompt_matches_transformers(engine, hf):
    ref = PARITY.reference(hf, TEXT_CHAT)
    ran = PARITY.run(engine, {"prompt": ref["text"]})
    assert all(out.hidden_states is None for out in ran[2])  # no engine_args.hidden_states
    PARITY.check(ran, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf):
    audio = sine()
    ref = PARITY.reference(hf, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 25
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ran = PARITY.run(engine, prompt)
    assert all(out.hidden_states is None for out in ran[2])  # no engine_args.hidden_states
    PARITY.check(ran, ref)  # vLLM expanded the placeholders as transformers did


def test_audio_with_token_id_prompt_matches_the_text_prompt(engine, hf):
    audio = sine()
    ref = PARITY.reference(hf, AUDIO_CHAT, audio=[audio])
    proc, _ = hf
    unexpanded = proc.tokenizer(ref["text"])["input_ids"]
    assert unexpanded.count(AUDIO_TOKEN) == 1
    prompt = {"prompt_token_ids": unexpanded, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ran = PARITY.run(engine, prompt)
    assert all(out.hidden_states is None for out in ran[2])  # no engine_args.hidden_states
    PARITY.check(ran, ref)


def test_image_and_text_prompt_matches_transformers(engine, hf):
    picture = image()
    ref = PARITY.reference(hf, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 56x56: 4x4 patches, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ran = PARITY.run(engine, prompt)
    assert all(out.hidden_states is None for out in ran[2])  # no engine_args.hidden_states
    PARITY.check(ran, ref)


@pytest.mark.parametrize(
    ("audio", "fragment"),
    [
        ("not audio", "multi_modal_data['audio']: expected a 1-D float waveform"),
        ((np.zeros(16000, dtype=np.int16), 16000), "the waveform must be float, not int16"),
        ((np.zeros(16000, dtype=np.float32), -1), "the sample rate must be a positive number"),
    ],
)
def test_bad_audio_fails_that_request_only_naming_the_field(engine, hf, audio, fragment):
    text = hf[0].apply_chat_template(AUDIO_CHAT, add_generation_prompt=True, tokenize=False)
    bad = {"prompt": text, "multi_modal_data": {"audio": audio}}

    async def go():
        return [out async for out in engine.generate(bad, sampling_params={"thinker": {}})]

    outs = asyncio.run(go())
    assert outs[-1].finished and outs[-1].error is not None
    assert outs[-1].error.status_code == 400 and fragment in outs[-1].error.message
    ids, _, _ = PARITY.run(
        engine, {"prompt": text, "multi_modal_data": {"audio": (sine(), SAMPLE_RATE)}}
    )
    assert len(ids) > 0  # the engine still serves
