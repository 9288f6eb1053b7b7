"""A process replica's engine that raises while accepting one request fails that request only
(omni_core.stage.worker), whatever the engine: here the scripted engine in its own process."""

from __future__ import annotations

import pytest

from tests.helpers import collect

PROCESS = """
name: process-errors
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 3, process: true}, final_output: true}
"""


async def pid(engine) -> int:
    (state,) = await engine.collective_rpc("get_state")
    return int(state["pid"])


@pytest.mark.parametrize(
    ("prompt", "params", "status", "error_type"),
    [
        # the engine cannot read the prompt's token ids: an invalid request (ValueError)
        ({"prompt_token_ids": ["x"]}, None, 400, "ValueError"),
        # its per-request options are no mapping: the engine fails on it (AttributeError)
        ("x", {"a": {"extra": {"scripted": 5}}}, 500, "AttributeError"),
    ],
)
async def test_an_exception_while_adding_fails_only_that_request(
    make_engine, prompt, params, status, error_type
):
    engine = make_engine(PROCESS)
    before = await pid(engine)
    outs = await collect(engine, prompt, sampling_params=params)
    assert [o.finished for o in outs] == [True]
    assert outs[0].finish_reason == "error"
    assert (outs[0].error.status_code, outs[0].error.type) == (status, error_type)
    ok = await collect(engine, "y")
    assert ok[-1].finish_reason == "stop" and len(ok) == 3
    assert await pid(engine) == before  # the same process kept serving
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
