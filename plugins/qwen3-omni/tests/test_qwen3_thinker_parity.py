"""The Qwen3-Omni MoE thinker on omni-core's vLLM stage against transformers, same tiny checkpoint.

Greedy, float32, up to 16 new tokens (both stop at <|im_end|>). Tolerance (vLLM's own HF-comparison
convention): the token ids must be equal; where they diverge, the first differing token of each
side must be in the other side's top-5 at that position (nothing after it is compared). Also
checked: vLLM's prompt ids (placeholders expanded by vLLM's multimodal processor) equal the
transformers processor's, so the audio / image really reached vLLM. One module-scoped engine.
"""

from __future__ import annotations

import pytest
from qwen3_helpers import AUDIO_TOKEN, IMAGE_TOKEN, greedy, image
from qwen_prompts import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, TEXT_CHAT, sine

from omni_core.testing.parity import GreedyParity, pipeline_engine

# The module's first test starts the engine (build, vLLM import, MoE thinker load in a stage
# process): 110 s measured at load average 8 on the 2 shared cores, over the default 60 s.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

NEW_TOKENS = 16
TOP_K = 5


@pytest.fixture(scope="module")
def engine(tiny_qwen3, qwen3_cache):
    with pipeline_engine("qwen3-omni-thinker", qwen3_cache) as engine:
        yield engine


PARITY = GreedyParity(greedy, NEW_TOKENS, TOP_K)


def test_text_prompt_matches_transformers(engine, hf3):
    ref = PARITY.reference(hf3, TEXT_CHAT)
    ran = PARITY.run(engine, {"prompt": ref["text"]})
    PARITY.check(ran, ref)
    assert len(set(ref["ids"])) > 1  # the random model's greedy output is not one token over


def test_audio_and_text_prompt_matches_transformers(engine, hf3):
    audio = sine()
    ref = PARITY.reference(hf3, AUDIO_CHAT, audio=[audio])
    assert ref["prompt_ids"].count(AUDIO_TOKEN) == 13
    prompt = {"prompt": ref["text"], "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    ran = PARITY.run(engine, prompt)
    PARITY.check(ran, ref)  # vLLM expanded the placeholders as transformers did


def test_image_and_text_prompt_matches_transformers(engine, hf3):
    """The prompt where a missing ``mrope_interleaved`` shows (t, h, w positions differ)."""
    picture = image()
    ref = PARITY.reference(hf3, IMAGE_CHAT, images=[picture])
    assert ref["prompt_ids"].count(IMAGE_TOKEN) == 4  # 64x64: 4x4 patches of 16, merged 2x2
    prompt = {"prompt": ref["text"], "multi_modal_data": {"image": picture}}
    ran = PARITY.run(engine, prompt)
    PARITY.check(ran, ref)
