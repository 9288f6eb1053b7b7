"""A real vLLM stage over the stage-process wire: its per-token frames carry no pickle, and the
final stage's ``RequestOutput`` payload is built in the client from the compact fields."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.outputs import TokenLogprob
from omni_core.plugin.hooks import PluginHost
from omni_core.stage import process, wire

ONE = PipelineConfig.from_yaml_text("""
name: vllm-wire
stages:
  - {id: 0, name: llm, kind: vllm, engine_args: {model: tiny-thinker, max_model_len: 256},
     sampling_params: {max_tokens: 6, temperature: 0.0, logprobs: 2}, final_output: true}
""")


@pytest.fixture(scope="module")
def engine():
    settings = OmniSettings()
    engine = AsyncOmniEngine(
        ONE, settings=settings, plugins=PluginHost.create(settings, load_entry_points=False)
    )
    yield engine
    engine.shutdown()


def test_token_frames_are_typed_without_pickle_and_request_outputs_are_rebuilt(engine, monkeypatch):
    frames: list[tuple[str, set[int]]] = []
    typed = process.parent_frames

    def spy(buf: bytearray) -> Any:
        for body in wire.split(bytearray(buf)):  # a copy: the client's read consumes ``buf``
            codes: set[int] = set()

            def hook(code: int, _: memoryview, codes: set[int] = codes) -> None:
                codes.add(code)

            raw: Any = msgspec.msgpack.Decoder(ext_hook=hook).decode(body)
            frames.append((raw[0], codes))
        return typed(buf)

    monkeypatch.setattr(process, "parent_frames", spy)

    async def go() -> list[Any]:
        return [o async for o in engine.generate("hello there", request_id="w")]

    outs = asyncio.run(go())
    tokens = [t for o in outs for t in o.token_ids]
    assert len(tokens) == 6 and outs[-1].finished
    out_frames = [codes for tag, codes in frames if tag == "out"]
    assert len(out_frames) >= 6  # one frame per step (several outputs each under load)
    assert all(wire.EXT_PICKLE not in codes for codes in out_frames)
    assert {tag for tag, _ in frames} <= {"out", "ack"}
    from omni_core.kinds.vllm_adapter import RequestOutput, WireRequestOutput

    assert all(isinstance(o.payload, WireRequestOutput) for o in outs if o.payload is not None)
    payloads = [o.payload.request_output() for o in outs if o.payload is not None]
    assert all(type(p) is RequestOutput for p in payloads)
    prompt_ids = payloads[0].prompt_token_ids
    assert prompt_ids and all(p.prompt_token_ids == prompt_ids for p in payloads)
    assert [t for p in payloads for t in p.outputs[0].token_ids] == tokens
    assert payloads[-1].finished and payloads[-1].outputs[0].finish_reason == "length"
    logprobs = [lp for o in outs for lp in (o.logprobs or [])]
    assert len(logprobs) == 6
    for token, candidates in zip(tokens, logprobs, strict=True):
        assert token in candidates and isinstance(candidates[token], TokenLogprob)
        assert candidates[token].logprob <= 0.0
