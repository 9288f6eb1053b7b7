"""The guided-request lifecycle through the public engine API (scripted AR stage).

The guided stage here is a ``python`` stage that returns the prompt it got, so every test sees
exactly which bundle reached it. The CFG plugin is registered under its entry-point name through
the testing kit's ``fake_entry_points``, as an installed one would be.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import types
import weakref
from types import SimpleNamespace

import omni_cfg.plugin as cfg_plugin
import pytest

from omni_core import hookimpl
from omni_core.testing import prompt_tokens, scripted_token

THIS = sys.modules[__name__].__name__


def denoise(prompt, params):
    """The guided stage: echoes the prompt it received."""
    return {"seen": prompt}


def pipeline(replicas=1, timeout_s=5.0, scale=3.0, extra=""):
    return f"""
name: guided
stages:
  - {{id: 0, name: encoder, kind: scripted, replicas: {replicas},
     engine_args: {{num_tokens: 4, delay_s: 0.001}}}}
  - {{id: 1, name: dit, kind: python, inputs: [0],
     engine_args: {{callable: "{THIS}:denoise"}}, final_output: true, final_output_type: image}}
cfg: {{stage: dit, guidance_scale: {scale}, negative_prompt: "blurry",
      timeout_s: {timeout_s}{extra}}}
"""


def enc(prompt, n=4):
    return [scripted_token("encoder", prompt_tokens(prompt), i) for i in range(n)]


@pytest.fixture
def submitted(fake_entry_points):
    """Registers the plugin (entry point ``cfg``) and a recorder of (request, stage, replica)."""
    fake_entry_points.add("cfg", cfg_plugin, distribution="omni-cfg", version="0.1.0")
    seen = []
    recorder = types.ModuleType("cfg_test_recorder")
    recorder.OMNI_PLUGIN_API_VERSION = 3

    @hookimpl
    def omni_stage_submitted(run_id, stage_id, replica):
        seen.append((run_id, stage_id, replica))

    recorder.omni_stage_submitted = omni_stage_submitted
    fake_entry_points.add("recorder", recorder)
    return seen


def guided(engine):
    """The plugin's object for the engine's pipeline (``omni_pipeline_plugin``)."""
    return engine.pipeline_plugin("cfg")


def tracker(engine):
    return guided(engine).guide.tracker


def assert_clean(engine):
    assert engine.num_active_requests == 0
    assert engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
    assert len(tracker(engine)) == 0


async def collect(engine, prompt, **kwargs):
    return [o async for o in engine.generate(prompt, **kwargs)]


def cfg_params(**cfg):
    return {"encoder": {"extra": {"cfg": cfg}}}


async def wait_for(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.005)


# --- the bundle ---------------------------------------------------------------------------------
async def test_bundle_reaches_guided_stage_companions_hidden_same_replica(submitted, make_engine):
    engine = make_engine(pipeline(replicas=2))
    for rid in ("a", "b", "c"):
        outs = await collect(engine, f"prompt {rid}", request_id=rid)
        assert [o.stage_name for o in outs] == ["dit"] and outs[0].finished
        assert {o.request_id for o in outs} == {rid}  # the companion is never shown
        assert outs[0].payload == {
            "seen": {
                "conditionings": [
                    {"tokens": enc(f"prompt {rid}"), "weight": 3.0},
                    {"tokens": enc("blurry"), "weight": -2.0},
                ]
            }
        }
        replicas = {(r, s): rep for r, s, rep in submitted}
        assert (f"{rid}#cfg-neg", 0) in replicas  # id derived from the parent's
        assert (f"{rid}#cfg-neg", 1) not in replicas  # companions stop at the AR stage
        assert replicas[(f"{rid}#cfg-neg", 0)] == replicas[(rid, 0)]
    assert len({rep for r, s, rep in submitted if s == 0}) == 2  # both replicas were used
    assert_clean(engine)


async def test_per_request_overrides_and_extra_branches(submitted, make_engine):
    engine = make_engine(pipeline(extra=", branches: [{name: img, prompt: sketch, scale: 0.5}]"))
    outs = await collect(
        engine, "x", sampling_params=cfg_params(guidance_scale=2.0, negative_prompt="ugly")
    )
    assert outs[-1].payload["seen"]["conditionings"] == [
        {"tokens": enc("x"), "weight": 2.0},
        {"tokens": enc("ugly"), "weight": -1.5},
        {"tokens": enc("sketch"), "weight": 0.5},
    ]
    outs = await collect(engine, "x", request_id="off", sampling_params=cfg_params(enabled=False))
    assert outs[-1].payload == {"seen": enc("x")}  # unguided: the plain bridge output
    assert not any(r.startswith("off#") for r, _, _ in submitted)
    assert_clean(engine)


async def test_a_disabled_section_guides_the_requests_that_ask(submitted, make_engine):
    engine = make_engine(pipeline(extra=", enabled: false"))
    outs = await collect(engine, "x", request_id="plain")
    assert outs[-1].payload == {"seen": enc("x")}  # no companion, the plain bridge output
    assert not any(r.startswith("plain#") for r, _, _ in submitted)
    # what omni run --negative-prompt ugly sets: the section's scale (3.0) applies
    outs = await collect(engine, "x", sampling_params=cfg_params(negative_prompt="ugly"))
    assert outs[-1].payload["seen"]["conditionings"] == [
        {"tokens": enc("x"), "weight": 3.0},
        {"tokens": enc("ugly"), "weight": -2.0},
    ]
    assert_clean(engine)


async def test_admission_is_all_or_nothing_with_one_clear_error(submitted, make_engine):
    engine = make_engine(pipeline())
    for bad in (cfg_params(guidance_scale="big"), cfg_params(companion_params={"max_tokens": 0})):
        outs = await collect(engine, "x", request_id="bad", sampling_params=bad)
        assert len(outs) == 1 and outs[0].finished and outs[0].finish_reason == "error"
        assert "plugin 'cfg' rejected the request" in outs[0].error.message
        assert "request 'bad'" in outs[0].error.message
    assert submitted == []  # nothing was admitted, nothing reached a stage
    assert_clean(engine)


async def test_an_engine_s_max_n_set_in_code_bounds_guided_requests(
    submitted, make_engine, omni_settings
):
    """omni-cfg reads the engine's settings (``port.settings``), not the environment: OMNI_MAX_N
    is unset here (16 by default), max_n=4 is the embedder's."""
    engine = make_engine(pipeline(), settings=omni_settings.model_copy(update={"max_n": 4}))
    outs = await collect(engine, "x", request_id="n3", sampling_params={"encoder": {"n": 3}})
    assert len(outs) == 1 and outs[0].error.status_code == 400
    assert "n=3 guided samples with 1 hidden companion" in outs[0].error.message
    assert "are 6 runs, at most 4" in outs[0].error.message
    assert submitted == []


async def test_too_many_branches_or_runs_are_refused_at_admission(
    submitted, make_engine, omni_settings
):
    engine = make_engine(pipeline(), settings=omni_settings.model_copy(update={"max_n": 6}))
    many = [{"name": f"b{i}", "prompt": "p", "scale": 0.1} for i in range(5000)]
    wide = {"encoder": {"n": 2, "extra": {"cfg": {"branches": many[:2]}}}}
    for rid, params, message in (
        ("many", cfg_params(branches=many), "extra['cfg'].branches: 5000 given, at most 8 "),
        ("wide", wide, "n=2 guided samples with 3 hidden companion request(s) each "),
    ):
        outs = await collect(engine, "x", request_id=rid, sampling_params=params)
        assert len(outs) == 1 and outs[0].finish_reason == "error"
        assert outs[0].error.status_code == 400
        assert f"plugin 'cfg' rejected the request: CfgError: request '{rid}': " in (
            outs[0].error.message
        )
        assert message in outs[0].error.message
    assert submitted == []  # nothing was admitted, nothing reached a stage
    # n=3 with the negative prompt only: 6 runs, within OMNI_MAX_N=6
    params = {"encoder": {"n": 3}}
    outs = await collect(engine, "x", request_id="ok", sampling_params=params)
    assert sorted(o.index for o in outs) == [0, 1, 2] and outs[-1].finished
    assert all(o.error is None for o in outs)
    assert len({r for r, s, _ in submitted if s == 0}) == 6
    assert_clean(engine)


# --- order independence -------------------------------------------------------------------------
async def test_companion_first_and_parent_first_converge(submitted, make_engine):
    engine = make_engine(pipeline())
    t = tracker(engine)
    first = await collect(
        engine, "q", sampling_params=cfg_params(companion_params={"max_tokens": 1})
    )
    assert t.deferrals == 0 and t.releases == 0  # the bundle was complete when the parent came
    parent_first = {
        "encoder": {"max_tokens": 1, "extra": {"cfg": {"companion_params": {"max_tokens": 4}}}}
    }
    second = await collect(engine, "q", sampling_params=parent_first)
    assert t.deferrals >= 1 and t.releases == 1  # deferred, then flushed by the companion
    assert first[-1].payload["seen"]["conditionings"][1]["tokens"] == enc("blurry", 1)
    assert second[-1].payload["seen"]["conditionings"] == [
        {"tokens": enc("q", 1), "weight": 3.0},
        {"tokens": enc("blurry"), "weight": -2.0},
    ]
    assert_clean(engine)


async def test_early_output_does_not_count_and_reaper_fails_parent(submitted, make_engine):
    engine = make_engine(pipeline(timeout_s=0.3))
    hang = cfg_params(companion_params={"extra": {"scripted": {"hang_after": 1}}})
    start = time.monotonic()
    outs = await collect(engine, "slow", request_id="p", sampling_params=hang)
    elapsed = time.monotonic() - start
    assert len(outs) == 1 and outs[0].finish_reason == "error"
    assert outs[0].error.type == "CfgTimeoutError"
    assert "'p#cfg-neg'" in outs[0].error.message and "0.3s" in outs[0].error.message
    assert 0.3 <= elapsed < 3.0
    assert tracker(engine).deferrals == 1  # one partial output did not release the parent
    assert_clean(engine)  # the hanging companion was aborted with the parent


async def test_reaper_serves_several_deadlines_in_order(submitted, make_engine):
    engine = make_engine(pipeline(timeout_s=5.0))

    async def one(rid, timeout):
        params = cfg_params(
            timeout_s=timeout, companion_params={"extra": {"scripted": {"hang_after": 1}}}
        )
        outs = await collect(engine, rid, request_id=rid, sampling_params=params)
        return rid, time.monotonic(), outs[-1].error.type

    results = await asyncio.gather(one("late", 0.6), one("early", 0.2))
    assert [r[2] for r in results] == ["CfgTimeoutError"] * 2
    assert results[1][1] < results[0][1]  # the later-armed, earlier deadline fired first
    assert_clean(engine)


# --- failures and aborts ------------------------------------------------------------------------
async def test_companion_failure_fails_parent_once(submitted, make_engine):
    engine = make_engine(pipeline())
    fail = cfg_params(companion_params={"extra": {"scripted": {"fail_after": 1}}})
    outs = await collect(engine, "x", request_id="f", sampling_params=fail)
    assert sum(o.finished for o in outs) == 1 and outs[-1].finish_reason == "error"
    assert "f#cfg-neg" in outs[-1].error.message
    assert_clean(engine)


async def test_companion_abort_before_delivery_fails_parent(submitted, make_engine):
    engine = make_engine(pipeline())
    hang = cfg_params(companion_params={"extra": {"scripted": {"hang_after": 1}}})
    gen = collect(engine, "x", request_id="p", sampling_params=hang)
    task = asyncio.ensure_future(gen)
    await wait_for(lambda: tracker(engine).deferrals > 0)
    result = await engine.abort_async("p#cfg-neg")
    assert result.success and result.outputs == []  # the companion itself is invisible
    outs = await task
    assert len(outs) == 1 and outs[0].finish_reason == "error"
    assert outs[0].error.type == "CfgCompanionError" and "'p#cfg-neg'" in outs[0].error.message
    again = await engine.abort_async("p#cfg-neg")  # repeating it is a silent no-op
    assert again.success and again.outputs == []
    assert_clean(engine)


async def test_delivered_companion_cleanup_keeps_bundle_parent_abort_is_silent(
    submitted, make_engine
):
    engine = make_engine(pipeline())
    t = tracker(engine)
    params = {
        "encoder": {
            "extra": {
                "scripted": {"hang_after": 2},  # the parent hangs in the AR stage
                "cfg": {"companion_params": {"extra": {}}},  # its companion does not
            }
        }
    }
    task = asyncio.ensure_future(collect(engine, "x", request_id="p", sampling_params=params))
    await wait_for(lambda: "p" in t.bundles and t.bundles["p"].complete)
    await wait_for(lambda: "p#cfg-neg" not in t.owner)  # the companion finished and was cleaned
    result = await engine.abort_async("p#cfg-neg")  # late abort of a delivered companion
    assert result.success and not task.done()
    assert t.bundles["p"].complete and engine.num_active_requests == 1  # bundle untouched
    result = await engine.abort_async("p")
    outs = await task
    assert result.success and outs[-1].finish_reason == "abort" and outs[-1].error is None
    assert_clean(engine)


async def test_parent_abort_expands_to_live_companions(submitted, make_engine):
    engine = make_engine(pipeline())
    hang = {"encoder": {"extra": {"scripted": {"hang_after": 1}}}}  # parent and companion hang
    task = asyncio.ensure_future(collect(engine, "x", request_id="p", sampling_params=hang))
    await wait_for(lambda: engine.request_tables()["bindings"] == 2)
    expanded = guided(engine).omni_expand_abort(["p"])
    assert list(expanded) == ["p#cfg-neg"]
    result = await engine.abort_async("p")
    outs = await task
    assert result.success and [o.finish_reason for o in outs] == ["abort"]
    assert_clean(engine)  # the companion's binding is gone too: it was aborted on its replica


async def test_replica_loss_before_delivery_fails_parent_once(submitted, make_engine):
    engine = make_engine(pipeline())
    hang = cfg_params(companion_params={"extra": {"scripted": {"hang_after": 1}}})
    task = asyncio.ensure_future(collect(engine, "x", request_id="p", sampling_params=hang))
    await wait_for(lambda: tracker(engine).deferrals > 0)
    await engine.collective_rpc("die", stage_ids=[0])
    outs = await task
    assert len(outs) == 1 and outs[0].finish_reason == "error"
    assert outs[0].error.type == "ReplicaDeadError"
    assert_clean(engine)


async def test_duplicate_completion_is_idempotent(submitted, make_engine):
    engine = make_engine(pipeline())
    orchestrator = engine._runtime.orchestrator
    plugin = guided(engine)
    t = plugin.guide.tracker
    params = {
        "encoder": {
            "extra": {"scripted": {"hang_after": 2}, "cfg": {"companion_params": {"extra": {}}}}
        }
    }
    task = asyncio.ensure_future(collect(engine, "x", request_id="p", sampling_params=params))
    await wait_for(lambda: "p" in t.bundles and t.bundles["p"].complete)
    bundle = dict(t.bundles["p"].outputs)
    from omni_core.outputs import StageOutput

    # a second completion of the same companion (as a racing duplicate would deliver it)
    dup = StageOutput(request_id="p#cfg-neg", token_ids=[1], finished=True, finish_reason="stop")

    async def duplicate():
        companion = SimpleNamespace(run_id="p#cfg-neg", stages={})  # ended: no longer held
        plugin.omni_stage_output(companion, 0, dup)
        return t.deliver("p#cfg-neg", object())

    fut = asyncio.run_coroutine_threadsafe(duplicate(), orchestrator.loop)
    assert await asyncio.wrap_future(fut) is None
    assert t.bundles["p"].outputs == bundle and t.releases == 0
    await engine.abort_async("p")
    await task
    assert_clean(engine)


# --- many at once -------------------------------------------------------------------------------
async def test_200_guided_requests_with_random_aborts(submitted, make_engine):
    engine = make_engine(pipeline(replicas=2))
    rng = random.Random(7)

    async def one(i):
        rid = f"r{i}"
        params = cfg_params(companion_params={"max_tokens": rng.choice([1, 4])})
        outs = []
        async for out in engine.generate(f"p{i}", request_id=rid, sampling_params=params):
            outs.append(out)
        return rid, outs

    async def aborter():
        for _ in range(60):
            await asyncio.sleep(rng.random() * 0.01)
            i = rng.randrange(200)
            engine.abort(rng.choice([f"r{i}", f"r{i}#cfg-neg"]))

    results, _ = await asyncio.gather(asyncio.gather(*(one(i) for i in range(200))), aborter())
    reasons = {}
    for rid, outs in results:
        assert sum(o.finished for o in outs) == 1 and outs[-1].finished, rid
        reasons[outs[-1].finish_reason] = reasons.get(outs[-1].finish_reason, 0) + 1
        if outs[-1].finish_reason == "stop":
            assert len(outs[-1].payload["seen"]["conditionings"]) == 2
    assert reasons.get("stop", 0) > 0
    await wait_for(lambda: engine.num_active_requests == 0)
    assert_clean(engine)


# --- the plugin's state: one object per pipeline ------------------------------------------------
async def test_each_engine_has_its_own_guide_and_an_unguided_one_none(submitted, make_engine):
    first, second = make_engine(pipeline()), make_engine(pipeline())
    plain = make_engine(
        "name: plain\nstages:\n  - {id: 0, name: s, kind: scripted, final_output: true}\n"
    )
    assert guided(first) is not guided(second)
    assert tracker(first) is not tracker(second)
    assert plain.pipeline_plugin("cfg") is None  # not guided: no object, no hook fires there
    state = (dict, list, set, weakref.WeakKeyDictionary)
    assert [k for k, v in vars(cfg_plugin).items() if isinstance(v, state) and k[0] != "_"] == []
    assert not hasattr(cfg_plugin, "_guides")  # no module-global state keyed by the port
    outs = await collect(first, "x", request_id="p")
    assert outs[-1].finish_reason == "stop"
    assert tracker(first).releases == 1 and tracker(second).releases == 0
    first.shutdown()
    assert first.pipeline_plugin("cfg") is None  # unregistered with its engine
