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
import torch
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, greedy, image, sine

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.plugin.hooks import PluginHost

NEW_TOKENS = 16
TOP_K = 5
AUDIO_TOKEN, IMAGE_TOKEN = 4003, 4012


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0)
    host = PluginHost.create(settings)
    config = host.pipelines()["qwen2.5-omni-thinker"].load()
    engine = AsyncOmniEngine(config, settings=settings, plugins=host)
    yield engine
    engine.shutdown()


def reference(hf, chat, **media: Any) -> dict[str, Any]:
    """transformers: the rendered prompt, its ids, the greedy ids and a top-k oracle."""
    text, inputs, ids = greedy(hf, chat, NEW_TOKENS, **media)
    model = hf[1]

    def top(position: int, prefix: list[int]) -> list[int]:
        """transformers' top-k ids for generated position ``position`` after ``prefix``."""
        forced = torch.tensor([inputs["input_ids"][0].tolist() + prefix[:position]])
        forward = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        with torch.no_grad():
            logits = model.thinker(input_ids=forced, **forward).logits[0, -1]
        return torch.topk(logits, TOP_K).indices.tolist()

    return {
        "text": text,
        "prompt_ids": inputs["input_ids"][0].tolist(),
        "ids": ids,
        "top": top,
    }


def run(engine, prompt: Any) -> tuple[list[int], list[Any], list[int]]:
    params = {"thinker": {"max_tokens": NEW_TOKENS, "temperature": 0.0, "logprobs": TOP_K}}

    async def go():
        ids: list[int] = []
        logprobs: list[Any] = []
        last = None
        async for out in engine.generate(prompt, sampling_params=params):
            ids.extend(out.token_ids)
            logprobs.extend(out.logprobs or [])
            assert out.hidden_states is None  # a stage without engine_args.hidden_states
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
        vllm_top = set(vllm_logprobs[i])
        assert theirs in vllm_top, f"step {i}: transformers' {theirs} not in vLLM's top-5"
        assert ours in ref["top"](i, ref["ids"]), f"step {i}: vLLM's {ours} not in HF's top-5"
        return
    assert len(vllm_ids) == len(ref["ids"])  # the same tokens, so both stopped at the same place


def test_text_prompt_matches_transformers(engine, hf):
    ref = reference(hf, TEXT_CHAT)
    ids, logprobs, prompt_ids = run(engine, {"prompt": ref["text"]})
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, logprobs, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf):
    audio = sine()
    ref = reference(hf, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 25
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, logprobs, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]  # vLLM expanded the placeholder as transformers did
    assert_close(ids, logprobs, ref)


def test_audio_with_token_id_prompt_matches_the_text_prompt(engine, hf):
    audio = sine()
    ref = reference(hf, AUDIO_CHAT, audio=[audio])
    proc, _ = hf
    unexpanded = proc.tokenizer(ref["text"])["input_ids"]
    assert unexpanded.count(AUDIO_TOKEN) == 1
    prompt = {"prompt_token_ids": unexpanded, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ids, logprobs, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, logprobs, ref)


def test_image_and_text_prompt_matches_transformers(engine, hf):
    picture = image()
    ref = reference(hf, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 56x56: 4x4 patches, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ids, logprobs, prompt_ids = run(engine, prompt)
    assert prompt_ids == ref["prompt_ids"]
    assert_close(ids, logprobs, ref)


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
