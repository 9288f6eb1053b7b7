"""Routing along the graph: chains, fan-in, several final stages, stream edges, ordering."""

from __future__ import annotations

import asyncio
from pathlib import Path

from omni_core.testing import prompt_tokens
from tests.helpers import CHAIN, by_stage, chain, collect, expected_tokens

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"


async def test_chain_routes_each_stage_output_to_the_next(make_engine):
    engine = make_engine(CHAIN)
    outs = await collect(engine, "hello")
    thinker, talker, vocoder = chain("hello", ("thinker", 4), ("talker", 6), ("vocoder", 3))
    assert by_stage(outs) == {"thinker": thinker, "vocoder": vocoder}
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    assert outs[-1].stage_name == "vocoder" and outs[-1].finish_reason == "stop"
    # the thinker's last output says its stage finished, without being request-terminal
    assert [o.finish_reason for o in outs if o.stage_name == "thinker"][-1] == "stop"
    assert engine.num_active_requests == 0


async def test_example_file_works_unchanged(make_engine):
    engine = make_engine(EXAMPLE.read_text())
    outs = await collect(engine, "hello")
    assert sum(o.finished for o in outs) == 1
    assert [o.stage_name for o in outs] == ["thinker"] * 4 + ["vocoder"] * 3


async def test_500_concurrent_requests_each_get_ordered_outputs_and_one_terminal(make_engine):
    engine = make_engine(CHAIN)

    async def one(i: int):
        return f"p{i}", await collect(engine, f"p{i}")

    results = await asyncio.gather(*(one(i) for i in range(500)))
    for prompt, outs in results:
        thinker, _, vocoder = chain(prompt, ("thinker", 4), ("talker", 6), ("vocoder", 3))
        assert by_stage(outs) == {"thinker": thinker, "vocoder": vocoder}
        assert sum(o.finished for o in outs) == 1 and outs[-1].finished
    assert engine.num_active_requests == 0
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}


FAN_IN = """
name: fan-in
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 2}}
  - {id: 1, name: b, kind: scripted, engine_args: {num_tokens: 3, delay_s: 0.002}}
  - {id: 2, name: mix, kind: scripted, inputs: [0, 1], engine_args: {num_tokens: 2}, final_output: true}
"""


async def test_fan_in_waits_for_every_input_and_concatenates_in_order(make_engine):
    engine = make_engine(FAN_IN)
    outs = await collect(engine, "x")
    a = expected_tokens("a", prompt_tokens("x"), 2)
    b = expected_tokens("b", prompt_tokens("x"), 3)
    assert by_stage(outs) == {"mix": expected_tokens("mix", a + b, 2)}


MULTI_FINAL = """
name: multi-final
stages:
  - {id: 0, name: text, kind: scripted, engine_args: {num_tokens: 3}, final_output: true, final_output_type: text}
  - {id: 1, name: audio, kind: scripted, inputs: [0], engine_args: {num_tokens: 2, delay_s: 0.001}, final_output: true, final_output_type: audio}
  - {id: 2, name: image, kind: scripted, inputs: [0], engine_args: {num_tokens: 1, output: whole}, final_output: true, final_output_type: image}
"""


async def test_several_final_stages_request_finishes_when_all_finished(make_engine):
    engine = make_engine(MULTI_FINAL)
    outs = await collect(engine, "q")
    assert sum(o.finished for o in outs) == 1 and outs[-1].finished
    stages = by_stage(outs)
    assert set(stages) == {"text", "audio", "image"}
    finished_stages = [o.stage_name for o in outs if o.finish_reason]
    assert sorted(finished_stages) == ["audio", "image", "text"]
    image = [o for o in outs if o.stage_name == "image"]
    assert len(image) == 1 and image[0].payload == image[0].token_ids  # whole output


async def test_modalities_skip_stages_that_feed_no_wanted_output(make_engine):
    engine = make_engine(MULTI_FINAL)
    outs = await collect(engine, "q", modalities=["text"])
    assert {o.stage_name for o in outs} == {"text"}
    assert outs[-1].finished and outs[-1].stage_name == "text"
    state = await engine.collective_rpc("get_state")
    assert all(s["total_outputs"] == 0 for s in state[1:])  # audio/image never ran


STREAM = """
name: stream
stages:
  - {id: 0, name: up, kind: scripted, engine_args: {num_tokens: 8, delay_s: 0.002}, final_output: true}
  - {id: 1, name: down, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 3}], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
"""


async def test_stream_edge_starts_downstream_before_upstream_finished(make_engine):
    engine = make_engine(STREAM)
    outs = await collect(engine, "s")
    names = [o.stage_name for o in outs]
    up_done = next(i for i, o in enumerate(outs) if o.stage_name == "up" and o.finish_reason)
    assert names.index("down") < up_done  # downstream output before upstream finished
    up = expected_tokens("up", prompt_tokens("s"), 8)
    chunks = [up[0:3], up[3:6], up[6:8]]
    down = [t for c in chunks for t in expected_tokens("down", c, 2)]
    assert by_stage(outs) == {"up": up, "down": down}  # nothing lost or reordered
    assert outs[-1].finished and outs[-1].stage_name == "down"


async def test_stage_without_usable_input_gives_a_synthetic_empty_terminal(make_engine, tmp_path):
    (tmp_path / "empty_engine.py").write_text("def run(prompt, params):\n    return ''\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        engine = make_engine("""
name: empty
stages:
  - {id: 0, name: first, kind: python, engine_args: {callable: "empty_engine:run"}}
  - {id: 1, name: second, kind: scripted, inputs: [0], final_output: true}
""")
        outs = await collect(engine, "z")
    finally:
        sys.path.remove(str(tmp_path))
    assert len(outs) == 1
    assert outs[0].finished and outs[0].stage_name == "second" and outs[0].token_ids == []
    assert outs[0].finish_reason == "stop"


def recording(monkeypatch) -> list[tuple[str, bool]]:
    from omni_core.testing.scripted import ScriptedStageClient

    seen: list[tuple[str, bool]] = []
    original = ScriptedStageClient.add_request

    async def add_request(self, request):
        seen.append((self.core.name, request.stream_outputs))
        await original(self, request)

    monkeypatch.setattr(ScriptedStageClient, "add_request", add_request)
    return seen


async def test_only_stages_whose_deltas_are_read_are_asked_to_stream(make_engine, monkeypatch):
    seen = recording(monkeypatch)
    await collect(make_engine(CHAIN), "x")
    # the talker is not final and feeds the vocoder on finish: its deltas are never read
    assert seen == [("thinker", True), ("talker", False), ("vocoder", True)]
    seen.clear()
    streamed = CHAIN.replace("inputs: [1]", "inputs: [{stage: 1, mode: stream, chunk: 2}]")
    await collect(make_engine(streamed), "x")
    assert ("talker", True) in seen


async def test_a_plugin_watching_outputs_gets_every_stage_streamed(
    make_engine, monkeypatch, fake_entry_points
):
    import types

    from omni_core import PLUGIN_API_VERSION, hookimpl

    watcher = types.ModuleType("watcher")
    watcher.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    watched: list[int] = []
    watcher.omni_stage_output = hookimpl(lambda stage_id: watched.append(stage_id))
    fake_entry_points.add("watcher", watcher)
    seen = recording(monkeypatch)
    await collect(make_engine(CHAIN), "x")
    assert seen == [("thinker", True), ("talker", True), ("vocoder", True)]
    assert watched.count(1) == 6  # every talker delta reached the observer


async def test_a_subclass_looking_at_outputs_gets_every_stage_streamed(monkeypatch, omni_settings):
    from omni_core import AsyncOmniEngine, PipelineConfig
    from omni_core.orchestrator.turn import Orchestrator
    from omni_core.plugin.hooks import PluginHost

    talker_outputs: list[int] = []

    class Watching(Orchestrator):
        def intercept_stage_output(self, run, stage_id, output):
            if stage_id == 1:
                talker_outputs.append(stage_id)
            return False

    class Engine(AsyncOmniEngine):
        def create_orchestrator(self, **kwargs):
            return Watching(**kwargs)

    seen = recording(monkeypatch)
    engine = Engine(
        PipelineConfig.from_yaml_text(CHAIN),
        settings=omni_settings,
        plugins=PluginHost.create(omni_settings, load_entry_points=False),
    )
    try:
        await collect(engine, "x")
    finally:
        engine.shutdown()
    assert ("talker", True) in seen and len(talker_outputs) == 6
