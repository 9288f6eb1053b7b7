"""The Qwen3-Omni MoE thinker on omni-core's vLLM stage against transformers, same tiny checkpoint.

Greedy, float32, up to 16 new tokens (both stop at <|im_end|>). Tolerance (vLLM's own HF-comparison
convention): the token ids must be equal; where they diverge, the first differing token of each
side must be in the other side's top-5 at that position (nothing after it is compared). Also
checked: vLLM's prompt ids (placeholders expanded by vLLM's multimodal processor) equal the
transformers processor's, so the audio / image really reached vLLM. One module-scoped engine.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from qwen3_helpers import AUDIO_TOKEN, IMAGE_TOKEN, greedy, image
from qwen_prompts import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, sine

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.plugin.hooks import PluginHost

# The module's first test starts the engine (build, vLLM import, MoE thinker load in a stage
# process): 110 s measured at load average 8 on the 2 shared cores, over the default 60 s.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

NEW_TOKENS = 16
TOP_K = 5


@pytest.fixture(scope="module")
def engine(tiny_qwen3, qwen3_cache):
    settings = OmniSettings(cache_dir=qwen3_cache, startup_timeout_s=300.0)
    host = PluginHost.create(settings)
    config = host.pipelines()["qwen3-omni-thinker"].load()
    engine = AsyncOmniEngine(config, settings=settings, plugins=host)
    yield engine
    engine.shutdown()


def reference(hf, chat, **media: Any) -> dict[str, Any]:
    """transformers: the rendered prompt, its ids, the greedy ids and a top-k oracle."""
    text, inputs, ids = greedy(hf, chat, NEW_TOKENS, **media)
    model = hf[1]

    def top(position: int, prefix: list[int]) -> list[int]:
        forced = torch.tensor([inputs["input_ids"][0].tolist() + prefix[:position]])
        forward = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        with torch.no_grad():
            logits = model.thinker(input_ids=forced, **forward).logits[0, -1]
        return torch.topk(logits, TOP_K).indices.tolist()

    return {"text": text, "prompt_ids": inputs["input_ids"][0].tolist(), "ids": ids, "top": top}


def run(engine, prompt: Any) -> tuple[list[int], list[Any], list[int]]:
    params = {"thinker": {"max_tokens": NEW_TOKENS, "temperature": 0.0, "logprobs": TOP_K}}

    async def go():
        ids: list[int] = []
        logprobs: list[Any] = []
        last = None
        async for out in engine.generate(prompt, sampling_params=params):
            ids.extend(out.token_ids)
            logprobs.extend(out.logprobs or [])
            last = out
        return ids, logprobs, last

    ids, logprobs, last = asyncio.run(go())
    assert last is not None and last.finished and last.error is None, last
    return ids, logprobs, list(last.payload.prompt_token_ids)


def assert_close(vllm_ids, vllm_logprobs, ref) -> None:
    """Equal ids, or at the first divergence each side's token in the other's top-5."""
    assert 0 < len(vllm_ids) <= NEW_TOKENS and len(vllm_logprobs) == len(vllm_ids)
    for i, (ours, theirs) in enumerate(zip(vllm_ids, ref["ids"], strict=False)):
        if ours == theirs:
            continue
        assert theirs in set(vllm_logprobs[i]), f"step {i}: HF's {theirs} not in vLLM's top-5"
        assert ours in ref["top"](i, ref["ids"]), f"step {i}: vLLM's {ours} not in HF's top-5"
        return
    assert len(vllm_ids) == len(ref["ids"])  # the same tokens, so both stopped at the same place


def test_text_prompt_matches_transformers(engine, hf3):
    ref = reference(hf3, TEXT_CHAT)
    ids, logprobs, prompt_ids = run(engine, {"prompt": ref["text"]})
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, logprobs, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf3):
    audio = sine()
    ref = reference(hf3, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 13
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, logprobs, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]  # vLLM expanded the placeholder as transformers did
    assert_close(ids, logprobs, ref)


def test_image_and_text_prompt_matches_transformers(engine, hf3):
    """The prompt where a missing ``mrope_interleaved`` shows (t, h, w positions differ)."""
    picture = image()
    ref = reference(hf3, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 64x64: 4x4 patches of 16, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ids, logprobs, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, logprobs, ref)
