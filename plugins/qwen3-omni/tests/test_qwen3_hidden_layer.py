"""The talker's thinker layer from omni-core's vLLM stage: ``engine_args.hidden_states.layers``
with ``layer:K`` (vLLM's auxiliary hidden-state outputs), against transformers' teacher-forced
``hidden_states[K]`` on the same tiny checkpoint (K = accept_hidden_layer = 2, past the one
deepstack level, so both sides take it at the same point).

Greedy, float32, 8 new tokens; every row (prompt + generated - 1) within 1e-4 max abs (the
reference sheet measured 3.1e-5 for this layer and 5.3e-6 for the embeddings). The talker reads
``layer:2`` only at the prompt's audio/image rows; those rows are checked to carry the encoders'
features (not the placeholder's text embedding).

The compiled route (``thinker_engine_args(compiled=True)``: vLLM compiles the language model and
the stage runs omni-qwen3's ``TapThinker``, its aux layer set at construction) gives the eager
route's rows within the same 1e-4, on the same prompts; each stage's model is asked what it is
(its class, its aux layers, whether vLLM compiled it), so the compiled test cannot pass on the
eager hook route. It starts one more engine and compiles it: ``slow``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from omni_qwen.api import thinker_stage
from omni_qwen3.build import ACCEPT_LAYER
from omni_qwen3.pipelines import thinker_engine_args
from omni_qwen3.vllm_plugin import describe
from qwen3_helpers import AUDIO_TOKEN, IMAGE_TOKEN, image
from qwen_prompts import AUDIO_CHAT, IMAGE_CHAT, SAMPLE_RATE, sine, teacher_forced

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError
from omni_core.outputs import join_hidden_states
from omni_core.plugin.hooks import PluginHost

# the first test starts the engine (110 s measured under load 8 on the 2 shared cores)
pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

NEW_TOKENS = 8
TOLERANCE = 1e-4
LAYER = f"layer:{ACCEPT_LAYER}"


def pipeline(layers: list[Any] | None = None, compiled: bool = False) -> dict[str, Any]:
    args = thinker_engine_args(hidden_layer=ACCEPT_LAYER, compiled=compiled)
    if layers is not None:
        args["hidden_states"]["layers"] = layers
    return {
        "name": "qwen3-thinker-hidden" + ("-compiled" if compiled else ""),
        "stages": [
            thinker_stage(args)
            | {"sampling_params": {"max_tokens": NEW_TOKENS, "temperature": 0.0}}
        ],
    }


def start(cache, compiled: bool = False) -> AsyncOmniEngine:
    settings = OmniSettings(cache_dir=cache, startup_timeout_s=600.0)
    config = PipelineConfig.from_dict(pipeline(compiled=compiled))
    return AsyncOmniEngine(config, settings=settings, plugins=PluginHost.create(settings))


@pytest.fixture(scope="module")
def engine(tiny_qwen3, qwen3_cache):
    engine = start(qwen3_cache)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def compiled_engine(tiny_qwen3, qwen3_cache):
    engine = start(qwen3_cache, compiled=True)
    yield engine
    engine.shutdown()


def model_of(engine) -> dict[str, Any]:
    """What the thinker stage's (one) replica runs, asked in its process."""
    (replica,) = asyncio.run(engine.collective_rpc("apply_model", args=(describe,), stage_ids=[0]))
    (model,) = replica if isinstance(replica, list) else [replica]
    return dict(model)


def prompt_of(hf3, chat, media: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stage's prompt of ``chat`` with its audio or image, and transformers' media."""
    data = (sine(), SAMPLE_RATE) if media == "audio" else image()
    text = hf3[0].apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    hf_media = {"audio": [data[0]]} if media == "audio" else {"images": [data]}
    return {"prompt": text, "multi_modal_data": {media: data}}, hf_media


def run(engine, prompt: Any) -> tuple[list[int], list[int], dict[str, Any]]:
    async def go():
        ids: list[int] = []
        chunks = []
        last = None
        async for out in engine.generate(prompt):
            ids.extend(out.token_ids)
            if out.hidden_states is not None:
                chunks.append(out.hidden_states)
            last = out
        assert last is not None and last.finished and last.error is None, last
        return ids, list(last.payload.prompt_token_ids), join_hidden_states(chunks)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("chat", "media", "token", "count"),
    [
        (AUDIO_CHAT, "audio", AUDIO_TOKEN, 13),
        (IMAGE_CHAT, "image", IMAGE_TOKEN, 4),
    ],
)
def test_accept_layer_rows_equal_transformers_hidden_states(engine, hf3, chat, media, token, count):
    request, hf_media = prompt_of(hf3, chat, media)
    ids, prompt, states = run(engine, request)
    ref_prompt, ref = teacher_forced(hf3, chat, ids, **hf_media)
    assert prompt == ref_prompt and prompt.count(token) == count
    assert set(states) == {"embeddings", LAYER}
    rows = len(prompt) + len(ids) - 1
    for name, index in (("embeddings", 0), (LAYER, ACCEPT_LAYER)):
        ours, theirs = states[name], ref[index][0].numpy()
        assert ours.shape == theirs.shape == (rows, 128)
        assert np.abs(ours - theirs).max() <= TOLERANCE, name
    # the layer differs from the embeddings and from the final state: a real intermediate layer
    assert np.abs(states[LAYER] - ref[0][0].numpy()).max() > 1e-2
    assert np.abs(states[LAYER] - ref[-1][0].numpy()).max() > 1e-2
    mm_rows = [i for i, t in enumerate(prompt) if t == token]
    text_embedding = hf3[1].thinker.get_input_embeddings().weight[token].detach().numpy()
    assert np.abs(states["embeddings"][mm_rows] - text_embedding).max() > 1e-2


@pytest.mark.slow
@pytest.mark.timeout(900)  # the compiled engine's start: ~120 s cold under load 8 (eager ~50 s)
def test_the_compiled_route_gives_the_eager_routes_rows(engine, compiled_engine, hf3):
    assert model_of(compiled_engine) == {
        "class": "TapThinker",
        "omni_aux_layers": [ACCEPT_LAYER],
        "compiled": True,
    }
    eager = model_of(engine)
    assert eager["class"] == "Qwen3OmniMoeThinkerForConditionalGeneration"
    assert not eager["compiled"]
    for chat, media in ((AUDIO_CHAT, "audio"), (IMAGE_CHAT, "image")):
        request, _ = prompt_of(hf3, chat, media)
        ids, prompt, states = run(engine, request)
        compiled_ids, compiled_prompt, compiled = run(compiled_engine, request)
        assert (compiled_ids, compiled_prompt) == (ids, prompt)
        for name in ("embeddings", LAYER):
            assert compiled[name].shape == states[name].shape == (len(prompt) + len(ids) - 1, 128)
            assert np.abs(compiled[name] - states[name]).max() <= TOLERANCE, (media, name)


def test_intermediate_layer_names_are_checked():
    host = PluginHost.create(OmniSettings())
    resolved = resolve_pipeline(PipelineConfig.from_dict(pipeline()), host)
    assert resolved.stages[0].args.hidden_states.layers == ["embeddings", LAYER]
    for bad in ("layer:0", "layer:x", 2):
        with pytest.raises(ConfigError, match=r"hidden_states.layers.*unknown layer"):
            resolve_pipeline(PipelineConfig.from_dict(pipeline(["embeddings", bad])), host)
