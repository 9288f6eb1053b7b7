"""A real vLLM stage keeps serving when one request fails in it.

Each trigger bypasses the edge validation (``extra["vllm"]`` carries the raw value to vLLM, or the
prompt is only too long once tokenized), so the stage process's own catch is what is tested: the
request ends with exactly one terminal output carrying the error (400 for what vLLM refuses, 500
for an injected fault), and the same replica — same process — serves the next request.

One engine for the module: a ``python`` feeder stage streams the caller's prompt into the vLLM
stage, whole (one chunk: a plain request there) or word by word (``extra={"words": True}``: a
streamed-input request, whose prompt grows chunk by chunk).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

MAX_MODEL_LEN = 64  # "word " is 3 tokens for tiny-thinker: 40 words do not fit

PIPELINE = PipelineConfig.from_yaml_text(f"""
name: vllm-request-errors
stages:
  - {{id: 0, name: feeder, kind: python,
     engine_args: {{callable: "tests.kinds.test_vllm_request_errors:feed"}}}}
  - {{id: 1, name: llm, kind: vllm, inputs: [{{stage: 0, mode: stream}}], bridge: text,
     engine_args: {{model: tiny-thinker, max_model_len: {MAX_MODEL_LEN}}},
     sampling_params: {{max_tokens: 4, temperature: 0.8, seed: 3}}, final_output: true}}
""")


async def feed(prompt: Any, params: SamplingParams) -> AsyncIterator[str]:
    """The prompt as one chunk, or word by word with ``extra={"words": True}``."""
    if not params.extra.get("words"):
        yield str(prompt)
        return
    for word in str(prompt).split():
        yield word + " "
        await asyncio.sleep(0.005)  # chunks arrive while the stage is generating


@pytest.fixture(scope="module")
def engine():
    os.environ["OMNI_FAULT_INJECTION"] = "1"  # read by the stage process at start-up
    try:
        settings = OmniSettings()
        engine = AsyncOmniEngine(
            PIPELINE,
            settings=settings,
            plugins=PluginHost.create(settings, load_entry_points=False),
        )
    finally:
        del os.environ["OMNI_FAULT_INJECTION"]
    yield engine
    engine.shutdown()


def llm(**fields: Any) -> dict[str, Any]:
    return {"llm": fields}


def raw(**vllm_fields: Any) -> dict[str, Any]:
    """Values for vLLM that skip our edge checks."""
    return llm(max_tokens=4, extra={"vllm": vllm_fields})


async def run(engine, prompt: Any, params: dict[str, Any] | None = None) -> list[Any]:
    return [o async for o in engine.generate(prompt, sampling_params=params)]


async def llm_pid(engine) -> int:
    (state,) = await engine.collective_rpc("get_state", stage_ids=[1])
    return int(state["pid"])


WORDS = "word " * 40
OK = llm(max_tokens=4, extra={"vllm": {"ignore_eos": True}})

TRIGGERS = [
    ("prompt longer than max_model_len", WORDS, None, 400, "PromptTooLongError"),
    (
        "streamed prompt outgrowing max_model_len",
        WORDS,
        {"feeder": {"extra": {"words": True}}},
        400,
        "PromptTooLongError",
    ),
    ("temperature 2.5", "hi", raw(temperature=2.5), 400, "VLLMValidationError"),
    ("temperature NaN", "hi", raw(temperature=math.nan), 400, "VLLMValidationError"),
    ("temperature 1e300", "hi", raw(temperature=1e300), 400, "VLLMValidationError"),
    ("seed 2**70", "hi", raw(seed=2**70, temperature=0.8), 400, "ValueError"),
    ("unknown vLLM field", "hi", raw(bogus=1), 400, "ValueError"),
    ("fault injected in add", "hi", llm(max_tokens=4, extra={"omni_fault": "add"}), 500, "RuntimeError"),
    ("fault injected in step", "hi", llm(max_tokens=4, extra={"omni_fault": "step"}), 500, "RuntimeError"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("prompt", "params", "status", "error_type"),
    [t[1:] for t in TRIGGERS],
    ids=[t[0] for t in TRIGGERS],
)
def test_a_failing_request_gets_one_error_terminal_and_the_replica_serves_on(
    engine, prompt, params, status, error_type
):
    async def go():
        pid = await llm_pid(engine)
        failed = await run(engine, prompt, params)
        ok = await run(engine, "hello there", OK)
        return pid, failed, ok, await llm_pid(engine)

    pid_before, failed, ok, pid_after = asyncio.run(go())
    assert [o.finished for o in failed].count(True) == 1 and failed[-1].finished
    terminal = failed[-1]
    assert terminal.finish_reason == "error"
    assert terminal.error is not None
    assert (terminal.error.status_code, terminal.error.type) == (status, error_type)
    if error_type == "PromptTooLongError":
        assert f"max_model_len ({MAX_MODEL_LEN} tokens)" in terminal.error.message
    assert ok[-1].finished and ok[-1].finish_reason == "length"
    assert sum(len(o.token_ids) for o in ok) == 4
    assert pid_after == pid_before  # the same process: no restart, no death
    assert engine.num_active_requests == 0


def test_a_failure_leaves_the_requests_beside_it_untouched(engine):
    long = llm(max_tokens=40, extra={"vllm": {"ignore_eos": True}})

    async def go():
        healthy = asyncio.ensure_future(run(engine, "hi", long))
        await asyncio.sleep(0.2)  # it is generating when the others fail
        failures = await asyncio.gather(
            run(engine, "hi", raw(temperature=math.nan)),
            run(engine, "hi", llm(max_tokens=4, extra={"omni_fault": "step"})),
            run(engine, "hi", {**raw(temperature=2.5), "feeder": {"n": 3}}),
        )
        return await healthy, failures

    healthy, failures = asyncio.run(go())
    assert healthy[-1].finish_reason == "length"
    assert sum(len(o.token_ids) for o in healthy) == 40
    for outs in failures:
        assert [o.finished for o in outs].count(True) == 1
        assert outs[-1].finish_reason == "error"
    (state,) = asyncio.run(engine.collective_rpc("get_state", stage_ids=[1]))
    assert state["unfinished"] == 0  # nothing of the failed requests left in vLLM


def test_sampling_fields_reach_vllm_and_what_it_would_fail_on_later_is_refused():
    from omni_core.kinds import vllm_adapter as va

    params = SamplingParams(
        max_tokens=7,
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        repetition_penalty=1.2,
        seed=-3,
        stop=["\n"],
        logprobs=2,
    )
    got = va.sampling_params(params)
    assert (got.max_tokens, got.temperature, got.top_p, got.top_k, got.min_p) == (
        7,
        0.5,
        0.9,
        5,
        0.1,
    )
    assert (got.frequency_penalty, got.presence_penalty, got.repetition_penalty) == (
        0.5,
        -0.5,
        1.2,
    )
    assert (got.seed, got.stop, got.logprobs) == (-3, ["\n"], 2)
    plain = va.sampling_params(SamplingParams())
    assert (plain.top_k, plain.seed, plain.stop, plain.logprobs) == (0, None, [], None)
    assert va.sampling_params(SamplingParams(extra={"vllm": {"top_k": 3}})).top_k == 3
    bad = [
        ({"seed": 2**70}, "seed must be a signed 64-bit integer"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"bogus": 1}, "bogus"),
    ]
    for fields, message in bad:
        with pytest.raises(ValueError, match=message):
            va.sampling_params(SamplingParams(extra={"vllm": fields}))
    with pytest.raises(ValueError, match=r"extra\['vllm'\] must be a mapping"):
        va.sampling_params(SamplingParams(extra={"vllm": [1]}))
