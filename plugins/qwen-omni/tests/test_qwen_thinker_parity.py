"""The Qwen2.5-Omni thinker on omni-core's vLLM stage against transformers, same tiny checkpoint.

Greedy, float32, up to 16 new tokens (both stop at <|im_end|>). Tolerance (vLLM's own HF-comparison
convention): the token ids must be equal; where they diverge, the first differing token of each
side must be in the other side's top-5 logprobs at that position (nothing after it is compared).
Also checked: vLLM's prompt ids (placeholders expanded by vLLM's multimodal processor) equal the
transformers processor's, so the audio / image really reached vLLM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, greedy, image, sine

from omni_core.testing.parity import (
    check_ids_or_top_k,
    greedy_top_k,
    pipeline_engine,
    top_k_oracle,
)

NEW_TOKENS = 16
TOP_K = 5
AUDIO_TOKEN, IMAGE_TOKEN = 4003, 4012


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    with pipeline_engine("qwen2.5-omni-thinker", qwen_cache) as engine:
        yield engine


def reference(hf, chat, **media: Any) -> dict[str, Any]:
    """transformers: the rendered prompt, its ids, the greedy ids and a top-k oracle."""
    text, inputs, ids = greedy(hf, chat, NEW_TOKENS, **media)
    top = top_k_oracle(hf[1].thinker, inputs, TOP_K)
    return {"text": text, "prompt_ids": inputs["input_ids"][0].tolist(), "ids": ids, "top": top}


def run(engine, prompt: Any) -> tuple[list[int], list[set[int]], list[int]]:
    ids, tops, outs = greedy_top_k(engine, prompt, "thinker", NEW_TOKENS, TOP_K)
    assert all(out.hidden_states is None for out in outs)  # no engine_args.hidden_states
    return ids, tops, list(outs[-1].payload.prompt_token_ids)


def assert_close(vllm_ids, vllm_tops, ref) -> None:
    """Equal ids, or at the first divergence each side's token in the other's top-5."""
    assert 0 < len(vllm_ids) <= NEW_TOKENS
    check_ids_or_top_k(vllm_ids, vllm_tops, ref["ids"], lambda i: ref["top"](i, ref["ids"]))


def test_text_prompt_matches_transformers(engine, hf):
    ref = reference(hf, TEXT_CHAT)
    ids, tops, prompt_ids = run(engine, {"prompt": ref["text"]})
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, tops, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf):
    audio = sine()
    ref = reference(hf, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 25
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, tops, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]  # vLLM expanded the placeholder as transformers did
    assert_close(ids, tops, ref)


def test_audio_with_token_id_prompt_matches_the_text_prompt(engine, hf):
    audio = sine()
    ref = reference(hf, AUDIO_CHAT, audio=[audio])
    proc, _ = hf
    unexpanded = proc.tokenizer(ref["text"])["input_ids"]
    assert unexpanded.count(AUDIO_TOKEN) == 1
    prompt = {"prompt_token_ids": unexpanded, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, tops, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, tops, ref)


def test_image_and_text_prompt_matches_transformers(engine, hf):
    picture = image()
    ref = reference(hf, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 56x56: 4x4 patches, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ids, tops, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, tops, ref)


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
    ids, _, _ = run(engine, {"prompt": text, "multi_modal_data": {"audio": (sine(), SAMPLE_RATE)}})
    assert len(ids) > 0  # the engine still serves
