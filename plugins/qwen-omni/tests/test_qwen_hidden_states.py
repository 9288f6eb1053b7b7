"""Per-token hidden states of the core ``vllm`` kind (``engine_args.hidden_states``) on the
Qwen2.5-Omni thinker, against transformers on the same tiny checkpoint.

Greedy, float32, 12 new tokens. The reference is teacher-forced: ``thinker(prompt + generated[:-1],
output_hidden_states=True)`` (the last sampled token is never forwarded), whose
``hidden_states[0]`` (LM input embeddings, audio merged) and ``hidden_states[-1]`` (final normed
hidden) must equal the stage's ``embeddings`` and ``final`` within 1e-4 max abs (measured: about
1e-5; float32 kernels differ between vLLM and transformers), with exactly
``prompt_len + generated - 1`` rows. The states arrive in step with the token stream: after every
output, the rows received so far are ``prompt_len + tokens received - 1``. The plain thinker
stage's outputs carry none (``test_qwen_thinker_parity.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from omni_qwen.pipelines import thinker_engine_args, thinker_stage
from qwen_helpers import AUDIO_CHAT, SAMPLE_RATE, TEXT_CHAT, sine, teacher_forced

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError
from omni_core.outputs import HiddenStates, join_hidden_states
from omni_core.plugin.hooks import PluginHost

NEW_TOKENS = 12
TOLERANCE = 1e-4  # max abs, float32
LAYERS = ["embeddings", -1]


def pipeline(**hidden: Any) -> dict[str, Any]:
    args = thinker_engine_args()
    del args["engine"]["enable_prefix_caching"]
    args["hidden_states"] = {"layers": LAYERS, **hidden}
    return {
        "name": "thinker-hidden",
        "stages": [
            thinker_stage(args)
            | {"sampling_params": {"max_tokens": NEW_TOKENS, "temperature": 0.0}}
        ],
    }


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0)
    # a small inline limit, so the prompt's arrays take the data plane and decode rows do not;
    # prompts prefilled in chunks of 32 tokens (chunked prefill), so rows come from several steps
    config = pipeline(inline_bytes=4096)
    config["stages"][0]["engine_args"]["engine"]["max_num_batched_tokens"] = 32
    config["stages"][0]["engine_args"]["max_num_seqs"] = 4
    config = PipelineConfig.from_dict(config)
    engine = AsyncOmniEngine(config, settings=settings, plugins=PluginHost.create(settings))
    yield engine
    engine.shutdown()


async def collect(engine, prompt: Any) -> tuple[list[int], list[int], list[HiddenStates]]:
    ids: list[int] = []
    chunks: list[HiddenStates] = []
    last = None
    async for out in engine.generate(prompt):
        ids.extend(out.token_ids)
        if out.hidden_states is not None:
            chunks.append(out.hidden_states)
        if ids:  # in step: the states of every forwarded token, and no more
            assert sum(c.rows for c in chunks) == len(prompt_ids(out, last)) + len(ids) - 1
        last = out
    assert last is not None and last.finished and last.error is None, last
    return ids, list(last.payload.prompt_token_ids), chunks


def run(engine, prompt: Any) -> tuple[list[int], list[int], list[HiddenStates]]:
    return asyncio.run(collect(engine, prompt))


def prompt_ids(out: Any, last: Any) -> list[int]:
    payload = out.payload if out.payload is not None else last.payload
    return list(payload.prompt_token_ids)


def check(chunks: list[HiddenStates], prompt: list[int], generated: list[int], ref: Any) -> None:
    assert chunks[0].start == 0 and chunks[0].rows == len(prompt)  # the prompt, with token 1
    states = join_hidden_states(chunks)
    assert set(states) == {"embeddings", "final"}
    rows = len(prompt) + len(generated) - 1
    for name, index in (("embeddings", 0), ("final", -1)):
        ours = states[name]
        assert ours.dtype == np.float32 and ours.shape == (rows, 128)
        theirs = ref[index][0].numpy()
        assert theirs.shape == ours.shape
        assert np.abs(ours - theirs).max() <= TOLERANCE, name


def test_text_prompt_hidden_states_equal_transformers(engine, hf):
    text = hf[0].apply_chat_template(TEXT_CHAT, add_generation_prompt=True, tokenize=False)
    ids, prompt, chunks = run(engine, {"prompt": text})
    assert len(ids) == NEW_TOKENS
    ref_prompt, ref = teacher_forced(hf, TEXT_CHAT, ids)
    assert prompt == ref_prompt
    check(chunks, prompt, ids, ref)


def test_audio_prompt_batched_with_a_text_prompt_equals_transformers(engine, hf):
    """Both requests in one batch, their prompts prefilled in 32-token chunks (the audio
    placeholder cut across chunks): each request's rows are its own."""
    audio = sine()
    text = hf[0].apply_chat_template(AUDIO_CHAT, add_generation_prompt=True, tokenize=False)
    prompt_in = {"prompt": text, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
    plain = hf[0].apply_chat_template(TEXT_CHAT, add_generation_prompt=True, tokenize=False)

    async def both():
        return await asyncio.gather(collect(engine, prompt_in), collect(engine, {"prompt": plain}))

    (ids, prompt, chunks), (text_ids, text_prompt, text_chunks) = asyncio.run(both())
    check(text_chunks, text_prompt, text_ids, teacher_forced(hf, TEXT_CHAT, text_ids)[1])
    ref_prompt, ref = teacher_forced(hf, AUDIO_CHAT, ids, audio=[audio])
    assert prompt == ref_prompt and prompt.count(4003) == 25  # the audio reached the LM
    check(chunks, prompt, ids, ref)
    # the audio rows are the audio encoder's output, not the placeholder's text embedding
    states = join_hidden_states(chunks)
    audio_rows = [i for i, t in enumerate(prompt) if t == 4003]
    text_embedding = hf[1].thinker.get_input_embeddings().weight[4003].detach().numpy()
    assert np.abs(states["embeddings"][audio_rows] - text_embedding).max() > 1e-2


def test_layer_vocabulary_and_prefix_caching_are_checked():
    host = PluginHost.create(OmniSettings())
    resolved = resolve_pipeline(PipelineConfig.from_dict(pipeline()), host)
    assert resolved.stages[0].args.hidden_states.layers == ["embeddings", "final"]
    config = pipeline()
    config["stages"][0]["engine_args"]["hidden_states"]["layers"] = ["embeddings", 3]
    with pytest.raises(ConfigError, match=r"engine_args.hidden_states.layers.*unknown layer 3"):
        resolve_pipeline(PipelineConfig.from_dict(config), host)
    config = pipeline()
    config["stages"][0]["engine_args"]["engine"]["enable_prefix_caching"] = True
    with pytest.raises(ConfigError, match=r"hidden_states.*enable_prefix_caching"):
        resolve_pipeline(PipelineConfig.from_dict(config), host)
