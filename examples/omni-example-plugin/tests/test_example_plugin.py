"""Tests of the example plugin, written with omni-core's testing kit (see conftest.py).

``fake_entry_points`` makes the plugin manager see this plugin as if it were installed (no
``pip install`` needed); ``make_engine`` builds a started engine and shuts it down after the test.
"""

from __future__ import annotations

import asyncio
import json

import omni_example_plugin.plugin as example_plugin
import pytest

from omni_core import SamplingParams
from omni_core.cli import main
from omni_core.plugin import PluginHost
from omni_core.testing import prompt_tokens, scripted_token

MIRROR = """
name: mirror
stages:
  - {id: 0, name: mirror, kind: reverse, engine_args: {delay_s: 0.0}, final_output: true}
"""

SLOW_MIRROR = MIRROR.replace("delay_s: 0.0", "delay_s: 0.01")

# testing-kit stage upstream, streamed into a reverse stage two outputs at a time
STREAMED = """
name: streamed
stages:
  - {id: 0, name: talker, kind: scripted, engine_args: {num_tokens: 5}}
  - {id: 1, name: mirror, kind: reverse, inputs: [{stage: 0, mode: stream, chunk: 2}],
     final_output: true, final_output_type: tokens}
"""

# fault injection: the scripted stage fails the request after one output
FAILING = STREAMED.replace("{num_tokens: 5}", "{num_tokens: 5, fail_after: 1}")


@pytest.fixture
def example(fake_entry_points):
    """Register the plugin module under its entry-point name, as an installed one would be."""
    fake_entry_points.add(
        "example",
        example_plugin,
        distribution="omni-example-plugin",
        version="0.1.0",
    )
    return example_plugin


async def collect(engine, prompt, **kwargs):
    return [o async for o in engine.generate(prompt, **kwargs)]


def tokens_of(outputs, stage_name):
    return [t for o in outputs if o.stage_name == stage_name for t in o.token_ids]


def test_plugin_registers_kind_bridge_pipeline_cli_and_observer(example, omni_settings):
    host = PluginHost.create(omni_settings)
    assert host.stage_kind_providers()["reverse"] == "example"
    assert host.stage_kinds()["reverse"].output_mode == "ar"
    assert "dedupe" in host.bridges()
    assert "example-reverse" in host.pipelines()
    assert [(plugin, group.name) for plugin, group in host.cli_groups()] == [("example", "example")]
    info = host.pm.plugin_info["example"]
    assert (info.distribution, info.version, info.builtin) == (
        "omni-example-plugin",
        "0.1.0",
        False,
    )
    assert host.hooks_of("example") == [
        "omni_pipeline_plugin",  # its observer lives on the object this returns, per pipeline
        "omni_register_bridges",
        "omni_register_cli_groups",
        "omni_register_pipelines",
        "omni_register_stage_kinds",
    ]


async def test_reverse_stage_streams_tokens_back_one_per_output(example, make_engine):
    engine = make_engine(MIRROR)
    outs = await collect(engine, [1, 2, 3, 4])
    assert [o.token_ids for o in outs] == [[4], [3], [2], [1]]
    assert [o.finished for o in outs] == [False, False, False, True]
    assert outs[-1].finish_reason == "stop"
    assert "".join(o.text for o in outs) == "4 3 2 1 "
    assert [o.token_ids for o in await collect(engine, "abc")] == [[99], [98], [97]]


async def test_max_tokens_cuts_the_reversed_stream_with_length(example, make_engine):
    engine = make_engine(MIRROR)
    outs = await collect(engine, [1, 2, 3, 4], sampling_params=SamplingParams(max_tokens=2))
    assert [o.token_ids for o in outs] == [[4], [3]]
    assert outs[-1].finished and outs[-1].finish_reason == "length"


async def test_named_pipeline_mirrors_dedupes_and_unmirrors(example, make_engine):
    engine = make_engine("example-reverse")  # the registered name, not a file
    outs = await collect(engine, [5, 5, 6, 7, 7])
    assert tokens_of(outs, "mirror") == [7, 7, 6, 5, 5]
    assert tokens_of(outs, "unmirror") == [5, 6, 7]  # dedupe forwarded [7, 6, 5]
    assert sum(o.finished for o in outs) == 1
    assert outs[-1].stage_name == "unmirror" and outs[-1].output_type == "tokens"


async def test_stream_edge_input_is_buffered_then_reversed(example, make_engine):
    engine = make_engine(STREAMED)
    outs = await collect(engine, "hi")
    talker = [scripted_token("talker", prompt_tokens("hi"), i) for i in range(5)]
    assert tokens_of(outs, "mirror") == talker[::-1]
    assert outs[-1].finished and outs[-1].finish_reason == "stop"


async def test_bad_prompt_fails_only_that_request(example, make_engine):
    engine = make_engine(MIRROR)
    [out] = await collect(engine, {"image": "cat.png"})
    assert out.finished and out.finish_reason == "error"
    assert out.error.status_code == 400 and "prompt_token_ids" in out.error.message
    assert (await collect(engine, [1]))[-1].finish_reason == "stop"  # still serving


async def test_abort_returns_the_reversed_prefix(example, make_engine):
    engine = make_engine(SLOW_MIRROR)
    gen = engine.generate(list(range(100)), request_id="r")
    first = await gen.__anext__()
    result = await engine.abort_async("r")
    assert result.success
    [out] = result.outputs
    assert out.finished and out.finish_reason == "abort" and not out.whole_sample_retry
    assert out.token_ids[0] == first.token_ids[0] == 99
    assert out.token_ids == list(range(99, 99 - len(out.token_ids), -1))
    assert [o.finish_reason for o in [o async for o in gen]] == ["abort"]
    state = await engine.collective_rpc("get_state")
    assert state == [{"running": []}]  # the replica stopped working on it


async def test_observer_counts_terminal_outcomes_by_finish_reason(example, make_engine):
    mirror = make_engine(MIRROR)
    await asyncio.gather(collect(mirror, [1, 2]), collect(mirror, "ok"))
    await collect(mirror, [1, 2, 3], sampling_params=SamplingParams(max_tokens=1))
    slow = make_engine(SLOW_MIRROR)
    gen = slow.generate(list(range(100)), request_id="a")
    await gen.__anext__()
    await slow.abort_async("a")
    await gen.aclose()
    failing = make_engine(FAILING)
    assert (await collect(failing, "x"))[-1].error.type == "ScriptedStageError"
    # one counter per engine (the plugin's object for its pipeline), each seeing its own runs
    counters = [engine.pipeline_plugin("example") for engine in (mirror, slow, failing)]
    assert [c.snapshot() for c in counters] == [
        {"length": 1, "stop": 2},
        {"abort": 1},
        {"error": 1},
    ]
    slow.shutdown()  # the counter leaves with its engine; the counts stay readable
    assert slow.pipeline_plugin("example") is None
    assert counters[1].snapshot() == {"abort": 1}


def test_cli_group_prints_outcome_counts(example, capsys):
    # omni_core.cli.main(argv) runs an omni command in this process and returns its exit code
    assert main(["example", "stats", "-p", "ab", "-p", "cd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"stop": 2}
    # max_tokens=1 cuts "mirror" (length), but the terminal reason is that of the final stage
    # that finished last: "unmirror" got one token and finished with "stop"
    assert main(["example", "stats", "-p", "ab", "--max-tokens", "1"]) == 0
    assert capsys.readouterr().out == "stop\t1\n"
    assert main(["example", "stats", "-p", "x", "--pipeline", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: nope: not a pipeline file")
