"""Hidden states handed to a downstream stage: the thinker (``hidden_states``, not a final stage
and nobody watching its deltas, so vLLM sends one output at the end) feeds a python stage
through a bridge that reads ``StageResult.hidden_states``, as a talker's bridge would. What the
bridge joined equals transformers' teacher-forced ``hidden_states[0]`` / ``[-1]`` within 1e-4 max
abs (float32, greedy), with ``prompt_len + generated - 1`` rows.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from omni_qwen.pipelines import thinker_engine_args
from qwen_helpers import AUDIO_CHAT, SAMPLE_RATE, sine, teacher_forced

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.plugin.hooks import PluginHost

TOLERANCE = 1e-4
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    args = thinker_engine_args()
    del args["engine"]["enable_prefix_caching"]
    args["hidden_states"] = {"layers": [0, "final"]}
    config = PipelineConfig.from_dict(
        {
            "name": "thinker-handoff",
            "stages": [
                {
                    "id": 0,
                    "name": "thinker",
                    "kind": "vllm",
                    "engine_args": args,
                    "sampling_params": {"max_tokens": NEW_TOKENS, "temperature": 0.0},
                },
                {
                    "id": 1,
                    "name": "consumer",
                    "kind": "python",
                    "engine_args": {"callable": "qwen_helpers:echo"},
                    "inputs": [0],
                    "bridge": "qwen_helpers:hidden_states_bridge",
                    "final_output": True,
                },
            ],
        }
    )
    # without omni-cfg (it intercepts every stage's outputs, so every stage would stream): the
    # thinker's outputs are read by nobody before it finished, so vLLM sends one, at the end
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0, disable_plugins=["cfg"])
    engine = AsyncOmniEngine(config, settings=settings, plugins=PluginHost.create(settings))
    yield engine
    engine.shutdown()


def test_a_downstream_bridge_gets_the_thinkers_hidden_states(engine, hf):
    audio = sine()
    text = hf[0].apply_chat_template(AUDIO_CHAT, add_generation_prompt=True, tokenize=False)
    prompt = {"prompt": text, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}

    async def go():
        return [out async for out in engine.generate(prompt)]

    outs = asyncio.run(go())
    assert outs[-1].finished and outs[-1].error is None, outs[-1]
    handed = outs[-1].payload
    ids, states = handed["ids"], handed["states"]
    assert len(ids) == NEW_TOKENS and set(states) == {"embeddings", "final"}
    assert handed["chunks"] == 1  # vLLM's one final output carried every row

    prompt_ids, ref = teacher_forced(hf, AUDIO_CHAT, ids, audio=[audio])
    rows = len(prompt_ids) + len(ids) - 1
    for name, index in (("embeddings", 0), ("final", -1)):
        assert states[name].shape == (rows, 128) and states[name].dtype == np.float32
        assert np.abs(states[name] - ref[index][0].numpy()).max() <= TOLERANCE, name
