"""A ``stream`` edge into a real vLLM stage: one resumable request whose context interleaves the
input chunks and the segments generated for each, prompt ids reported per segment; with stop
strings (which vLLM refuses in a resumable request) each chunk re-prefills as before."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.models import resolve_model
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

PIPELINE = PipelineConfig.from_yaml_text("""
name: vllm-stream-edge
stages:
  - {id: 0, name: feeder, kind: python,
     engine_args: {callable: "tests.kinds.test_vllm_stream_edge:feed"}}
  - {id: 1, name: llm, kind: vllm, inputs: [{stage: 0, mode: stream}], bridge: text,
     engine_args: {model: tiny-thinker, max_model_len: 256},
     sampling_params: {max_tokens: 3, temperature: 0.0, extra: {vllm: {ignore_eos: true}}},
     final_output: true}
""")
WORDS = ["hello", " there", " my", " friend"]


async def feed(prompt: Any, params: SamplingParams) -> AsyncIterator[str]:
    for word in WORDS:
        yield word
        await asyncio.sleep(params.extra.get("pause", 0.01))


@pytest.fixture(scope="module")
def engine():
    settings = OmniSettings()
    engine = AsyncOmniEngine(
        PIPELINE, settings=settings, plugins=PluginHost.create(settings, load_entry_points=False)
    )
    yield engine
    engine.shutdown()


def segments(engine, params: dict[str, Any] | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, tokens) per segment: a segment starts where the reported prompt changes."""

    async def go():
        return [o async for o in engine.generate("x", sampling_params=params)]

    outs = asyncio.run(go())
    assert [o.finished for o in outs].count(True) == 1 and outs[-1].finished
    assert outs[-1].finish_reason == "length"
    found: list[tuple[list[int], list[int]]] = []
    for out in outs:
        prompt = out.payload.prompt_token_ids if out.payload is not None else None
        if prompt is not None and (not found or found[-1][0] != prompt):
            found.append((list(prompt), []))
        found[-1][1].extend(out.token_ids)
    return found


def prefilled(engine) -> int:
    (state,) = asyncio.run(engine.collective_rpc("get_state", stage_ids=[1]))
    return int(state["prefilled_tokens"])


def test_the_context_interleaves_chunks_and_segments_with_prompt_ids_reported(engine):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model("tiny-thinker", OmniSettings().cache_dir)
    )
    before = prefilled(engine)
    found = segments(engine)
    assert len(found) == len(WORDS)  # one segment per chunk
    # prefilled: the chunks and each re-fed last token, never the context again
    context = len(found[-1][0])
    assert prefilled(engine) - before == context - sum(len(t) - 1 for _, t in found[:-1])
    assert [len(tokens) for _, tokens in found] == [3] * len(WORDS)
    assert found[0][0] == tokenizer.encode(WORDS[0])  # vLLM's tokenization of the first chunk
    for (prompt, tokens), (after, _), word in zip(found, found[1:], WORDS[1:], strict=False):
        # the whole previous segment (its last token re-fed), then the chunk: nothing re-sent
        assert after == prompt + tokens + tokenizer.encode(word, add_special_tokens=False)
    assert engine.num_active_requests == 0


def test_stop_strings_keep_re_prefilling_each_chunk(engine):
    stop = {"max_tokens": 3, "temperature": 0.0, "stop": ["never-generated"]}
    found = segments(engine, {"llm": {**stop, "extra": {"vllm": {"ignore_eos": True}}}})
    assert len(found) == len(WORDS)
    # each chunk's generation runs over the chunks so far only (no segment in its prompt)
    for (prompt, tokens), (after, _) in itertools.pairwise(found):
        assert after[: len(prompt)] == prompt and after[len(prompt) :][:3] != tokens


def test_abort_mid_session_ends_it_once_and_frees_it_in_vllm(engine):
    async def go():
        outs = []
        async for out in engine.generate(
            "x", request_id="mid", sampling_params={"feeder": {"extra": {"pause": 0.5}}}
        ):
            outs.append(out)
            if len(outs) == 1:  # the first segment is out; the session waits for its next chunk
                assert (await engine.abort_async("mid")).success
        (state,) = await engine.collective_rpc("get_state", stage_ids=[1])
        return outs, state

    outs, state = asyncio.run(go())
    assert [o.finished for o in outs].count(True) == 1 and outs[-1].finish_reason == "abort"
    assert state["unfinished"] == 0  # the live request ended in vLLM (KV and slot freed)
    assert engine.num_active_requests == 0
