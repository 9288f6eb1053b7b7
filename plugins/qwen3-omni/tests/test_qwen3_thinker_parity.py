"""The Qwen3-Omni MoE thinker on omni-core's vLLM stage against transformers, same tiny checkpoint.

Greedy, float32, up to 16 new tokens (both stop at <|im_end|>). Tolerance (vLLM's own HF-comparison
convention): the token ids must be equal; where they diverge, the first differing token of each
side must be in the other side's top-5 at that position (nothing after it is compared). Also
checked: vLLM's prompt ids (placeholders expanded by vLLM's multimodal processor) equal the
transformers processor's, so the audio / image really reached vLLM. One module-scoped engine.
"""

from __future__ import annotations

from typing import Any

import pytest
from qwen3_helpers import AUDIO_TOKEN, IMAGE_TOKEN, greedy, image
from qwen_prompts import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, sine

from omni_core.testing.parity import (
    check_ids_or_top_k,
    greedy_top_k,
    pipeline_engine,
    top_k_oracle,
)

# The module's first test starts the engine (build, vLLM import, MoE thinker load in a stage
# process): 110 s measured at load average 8 on the 2 shared cores, over the default 60 s.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

NEW_TOKENS = 16
TOP_K = 5


@pytest.fixture(scope="module")
def engine(tiny_qwen3, qwen3_cache):
    with pipeline_engine("qwen3-omni-thinker", qwen3_cache) as engine:
        yield engine


def reference(hf, chat, **media: Any) -> dict[str, Any]:
    """transformers: the rendered prompt, its ids, the greedy ids and a top-k oracle."""
    text, inputs, ids = greedy(hf, chat, NEW_TOKENS, **media)
    top = top_k_oracle(hf[1].thinker, inputs, TOP_K)
    return {"text": text, "prompt_ids": inputs["input_ids"][0].tolist(), "ids": ids, "top": top}


def run(engine, prompt: Any) -> tuple[list[int], list[set[int]], list[int]]:
    ids, tops, outs = greedy_top_k(engine, prompt, "thinker", NEW_TOKENS, TOP_K)
    return ids, tops, list(outs[-1].payload.prompt_token_ids)


def assert_close(vllm_ids, vllm_tops, ref) -> None:
    """Equal ids, or at the first divergence each side's token in the other's top-5."""
    assert 0 < len(vllm_ids) <= NEW_TOKENS
    check_ids_or_top_k(vllm_ids, vllm_tops, ref["ids"], lambda i: ref["top"](i, ref["ids"]))


def test_text_prompt_matches_transformers(engine, hf3):
    ref = reference(hf3, TEXT_CHAT)
    ids, tops, prompt_ids = run(engine, {"prompt": ref["text"]})
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, tops, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf3):
    audio = sine()
    ref = reference(hf3, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 13
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, tops, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]  # vLLM expanded the placeholder as transformers did
    assert_close(ids, tops, ref)


def test_image_and_text_prompt_matches_transformers(engine, hf3):
    """The prompt where a missing ``mrope_interleaved`` shows (t, h, w positions differ)."""
    picture = image()
    ref = reference(hf3, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 64x64: 4x4 patches of 16, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ids, tops, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, tops, ref)
