"""The public engine API: ids, params, prompts, modalities, sync engine, construction."""

from __future__ import annotations

import asyncio
import gc

import pytest

from omni_core import (
    AsyncOmniEngine,
    ConfigError,
    OmniEngine,
    PipelineConfig,
    RequestError,
    SamplingParams,
    StartupError,
)
from omni_core.config.settings import OmniSettings
from tests.helpers import CHAIN, by_stage, chain, collect, expected_tokens


async def test_generated_request_id_is_on_every_output(make_engine):
    engine = make_engine(CHAIN)
    a = await collect(engine, "x")
    b = await collect(engine, "x")
    assert len({o.request_id for o in a}) == 1 and len({o.request_id for o in b}) == 1
    assert a[0].request_id != b[0].request_id
    assert engine.new_request_id() != engine.new_request_id()


async def test_duplicate_in_flight_id_is_rejected(make_engine):
    engine = make_engine(CHAIN.replace("delay_s: 0.001", "delay_s: 0.05"))
    first = engine.generate("x", request_id="same")
    await first.__anext__()
    with pytest.raises(RequestError, match="'same' is already in flight"):
        await collect(engine, "y", request_id="same")
    rest = [o async for o in first]
    assert rest[-1].finished


async def test_prompt_as_token_ids_and_dict(make_engine):
    engine = make_engine(CHAIN)
    by_ids = by_stage(await collect(engine, [104, 105]))
    by_text = by_stage(await collect(engine, "hi"))
    by_dict = by_stage(await collect(engine, {"prompt": "hi", "images": []}))
    assert by_ids == by_text == by_dict


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sampling_params": SamplingParams(n=0)}, r"sampling_params.n: expected `int` >= 1"),
        ({"sampling_params": {"nope": {}}}, "unknown stage 'nope'"),
        ({"sampling_params": {"talker": {"max_tokenz": 3}}}, r"sampling_params\['talker'\]"),
        ({"modalities": ["video"]}, "offers"),
        ({"request_id": ""}, "non-empty"),
    ],
)
async def test_bad_requests_get_one_clear_error(make_engine, kwargs, message):
    engine = make_engine(CHAIN)
    with pytest.raises(RequestError, match=message):
        await collect(engine, "x", **kwargs)
    assert (await collect(engine, "x"))[-1].finished  # nothing else lost


async def test_bad_prompt_type(make_engine):
    engine = make_engine(CHAIN)
    with pytest.raises(RequestError, match="prompt must be"):
        await collect(engine, 3.5)


async def test_per_stage_params_by_name(make_engine):
    engine = make_engine(CHAIN)
    outs = await collect(engine, "x", sampling_params={"talker": {"max_tokens": 2}})
    thinker = expected_tokens("thinker", list(b"x"), 4)
    talker = expected_tokens("talker", thinker, 2)
    assert by_stage(outs)["vocoder"] == expected_tokens("vocoder", talker, 3)
    outs = await collect(engine, "x", sampling_params=SamplingParams(max_tokens=1))
    assert outs[-1].finish_reason == "length"
    assert [len(v) for v in by_stage(outs).values()] == [1, 1]


async def test_parallel_sampling_children_carry_their_index(make_engine):
    engine = make_engine(CHAIN)
    outs = await collect(engine, "x", request_id="par", sampling_params={"thinker": {"n": 3}})
    assert {o.request_id for o in outs} == {"par"}
    assert sorted({o.index for o in outs}) == [0, 1, 2]
    assert sum(o.finished for o in outs) == 1 and outs[-1].finished
    for i in range(3):
        mine = by_stage([o for o in outs if o.index == i])
        expected = chain("x", ("thinker", 4), ("talker", 6), ("vocoder", 3))
        assert mine == {"thinker": expected[0], "vocoder": expected[2]}
    # each child's last vocoder output has its finish reason
    assert sum(1 for o in outs if o.stage_name == "vocoder" and o.finish_reason) == 3
    assert engine.request_tables()["runs"] == 0


def test_sync_engine_generates_lists(omni_settings, plugin_host):
    config = PipelineConfig.from_yaml_text(CHAIN)
    with OmniEngine(config, settings=omni_settings, plugins=plugin_host) as engine:
        results = engine.generate(["a", "b"])
        assert len(results) == 2
        for prompt, outs in zip(["a", "b"], results, strict=True):
            assert (
                by_stage(outs)["vocoder"]
                == chain(prompt, ("thinker", 4), ("talker", 6), ("vocoder", 3))[2]
            )
        assert engine.pause_scheduler() == [{"ok": True, "method": "pause_scheduler"}] * 3
        assert engine.num_active_requests == 0
    assert not engine.is_alive()


async def test_async_create_does_not_block_the_loop(omni_settings, plugin_host):
    config = PipelineConfig.from_yaml_text(
        CHAIN.replace("{num_tokens: 6}", "{num_tokens: 6, start_delay_s: 0.2}")
    )
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    engine = await AsyncOmniEngine.create(config, settings=omni_settings, plugins=plugin_host)
    task.cancel()
    async with engine:
        assert (await collect(engine, "x"))[-1].finished
    assert ticks > 20  # the caller's loop kept running while stages started
    assert not engine.is_alive()


def test_startup_failure_names_the_stage(omni_settings, plugin_host):
    config = PipelineConfig.from_yaml_text(
        CHAIN.replace("{num_tokens: 6}", "{num_tokens: 6, start_fails: true}")
    )
    with pytest.raises(StartupError, match="stage 'talker' \\(id 1\\) replica 0 failed to start"):
        AsyncOmniEngine(config, settings=omni_settings, plugins=plugin_host)


def test_engine_kind_mismatch_is_a_config_error(omni_settings, plugin_host):
    config = PipelineConfig.from_yaml_text(CHAIN + "engine: turn\n")
    AsyncOmniEngine(config, settings=omni_settings, plugins=plugin_host).shutdown()
    bad = PipelineConfig.from_yaml_text(CHAIN + "engine: nope\n")
    with pytest.raises(ConfigError, match="unknown engine kind 'nope'"):
        AsyncOmniEngine(bad, settings=omni_settings, plugins=plugin_host)
    from omni_core import OmniEngineBase

    class OtherEngine(OmniEngineBase):
        pass

    with pytest.raises(
        ConfigError, match="selects engine 'turn' \\(AsyncOmniEngine\\), not OtherEngine"
    ):
        OtherEngine(config, settings=omni_settings, plugins=plugin_host)


async def test_request_queue_backpressure_still_serves_everyone(make_engine, omni_settings):
    settings = omni_settings.model_copy(update={"request_queue_size": 2})
    engine = make_engine(CHAIN, settings=settings)
    results = await asyncio.gather(*(collect(engine, f"q{i}") for i in range(50)))
    assert all(sum(o.finished for o in outs) == 1 for outs in results)


async def test_gc_threshold_setting_applies_when_the_engine_starts(make_engine, monkeypatch):
    before = gc.get_threshold()
    try:
        monkeypatch.setenv("OMNI_GC_THRESHOLD", "54321")
        engine = make_engine(CHAIN, settings=OmniSettings())
        assert gc.get_threshold() == (54321, *before[1:])
        assert len(await collect(engine, "x")) == 7
    finally:
        gc.set_threshold(*before)


async def test_generate_takes_chat_messages_rendered_by_the_first_stage(make_engine):
    engine = make_engine(CHAIN)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    from_chat = by_stage(await collect(engine, None, messages=messages))
    rendered = engine.render_chat(messages)
    assert rendered.prompt == "s\nhello" and rendered.num_tokens is None  # scripted: no tokenizer
    assert from_chat == by_stage(await collect(engine, rendered.prompt))
    assert from_chat != by_stage(await collect(engine, "hello"))  # the system message counted
    with pytest.raises(RequestError, match="either a prompt or messages"):
        await collect(engine, "x", messages=messages)
    with pytest.raises(
        RequestError, match=r"messages\[0\]\.content\[0\]: content part 'input_audio'"
    ):
        await collect(
            engine,
            None,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
                    ],
                }
            ],
        )


def test_seeded_parallel_samples_get_seed_plus_index():
    """As vLLM's parallel sampling: child i samples with seed + i (so seeded children differ,
    and child i equals a single request seeded seed + i)."""
    from omni_core.orchestrator.turn import child_params

    params = {0: SamplingParams(seed=7), 1: SamplingParams()}
    assert child_params(params, 3)[0].seed == 10 and child_params(params, 3)[1].seed is None
    top = SamplingParams(seed=2**63 - 1)
    assert child_params({0: top}, 1)[0].seed == -(2**63)  # wraps within a signed 64-bit seed


async def test_a_requests_seed_reaches_every_stage_without_its_own(make_engine):
    """The request's seed (its first stage's) is every downstream stage's too (a talker's codes,
    a vocoder's noise sample reproducibly), children get seed + i in every stage, and a stage
    whose params carry their own seed keeps it; an unseeded request seeds no stage."""
    from omni_core import PLUGIN_API_VERSION, hookimpl
    from omni_core.plugin.hooks import PluginHost

    seen: dict[str, dict[int, int | None]] = {}

    class Recorder:
        OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

        @hookimpl
        def omni_request_admitted(self, run_id, request_id, request, port):
            seen[run_id] = {sid: p.seed for sid, p in request.params.items()}

    settings = OmniSettings()
    host = PluginHost.create(
        settings, load_entry_points=False, extra_plugins=[("seed-recorder", Recorder())]
    )
    engine = make_engine(CHAIN, settings=settings, plugins=host)
    await collect(engine, "x", request_id="a", sampling_params={"thinker": {"seed": 5}})
    assert seen["a"] == {0: 5, 1: 5, 2: 5}
    own = {"thinker": {"seed": 5, "n": 2}, "vocoder": {"seed": 9}}
    await collect(engine, "x", request_id="b", sampling_params=own)
    assert seen["0_b"] == {0: 5, 1: 5, 2: 9} and seen["1_b"] == {0: 6, 1: 6, 2: 10}
    await collect(engine, "x", request_id="c")
    assert seen["c"] == {0: None, 1: None, 2: None}
