"""Shutdown: ordering, idempotence, bounds, pending callers released, no orphan processes."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from omni_core import PLUGIN_API_VERSION, EngineDeadError, hookimpl
from omni_core.plugin.types import StageKind
from omni_core.testing.scripted import ScriptedStageClient
from omni_core.testing.scripted_core import ScriptedArgs
from tests.helpers import CHAIN, collect


def ordering_plugin(events: list, engines: list):
    module = types.ModuleType("ordering_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    class Recording(ScriptedStageClient):
        async def shutdown(self):
            runtime = engines[0]._runtime
            events.append(
                (
                    "stage_shutdown",
                    runtime.router._fatal is not None,
                    runtime.orchestrator.tasks.stop.is_set(),
                )
            )
            await super().shutdown()

    @hookimpl
    def omni_register_stage_kinds():
        return [
            StageKind(
                "recording",
                lambda stage, i, ctx: Recording(
                    "rec", stage.name, ScriptedArgs.model_validate(stage.engine_args)
                ),
                ScriptedArgs,
            )
        ]

    @hookimpl
    def omni_shutdown(port):
        async def extension():
            events.append(("extension", engines[0]._runtime.router._fatal is not None))

        return extension

    module.omni_register_stage_kinds = omni_register_stage_kinds
    module.omni_shutdown = omni_shutdown
    return module


def test_order_router_then_orchestrator_then_stages(fake_entry_points, make_engine):
    events: list = []
    engines: list = []
    fake_entry_points.add("ordering", ordering_plugin(events, engines))
    engines.append(make_engine(CHAIN.replace("kind: scripted", "kind: recording")))
    engines[0].shutdown()
    assert events[0] == ("extension", True)  # the router was closed first
    assert events[1:] == [("stage_shutdown", True, True)] * 3  # after the orchestrator stopped


async def test_shutdown_is_idempotent_and_releases_pending_generate(make_engine):
    engine = make_engine(CHAIN.replace("delay_s: 0.001", "delay_s: 0.5"))
    gen = engine.generate("x")
    task = asyncio.ensure_future(collect_all(gen))
    await asyncio.sleep(0.05)
    await asyncio.to_thread(engine.shutdown)
    await asyncio.to_thread(engine.shutdown)
    with pytest.raises(EngineDeadError):
        async with asyncio.timeout(5):
            await task
    assert not engine.is_alive()
    with pytest.raises(EngineDeadError):
        await collect(engine, "y")
    engine.abort("anything")  # a quiet no-op after shutdown


async def collect_all(gen):
    return [o async for o in gen]


def test_shutdown_is_bounded_with_a_full_queue(make_engine, omni_settings):
    settings = omni_settings.model_copy(update={"request_queue_size": 1})
    engine = make_engine(CHAIN, settings=settings)
    for _ in range(50):
        engine._runtime.inbox.put_nowait(object(), force=True)  # stuff the queue
    start = time.monotonic()
    engine.shutdown(timeout=5)
    assert time.monotonic() - start < 5
    assert not engine.is_alive()


def test_garbage_collected_engine_shuts_down(make_engine, omni_settings, plugin_host):
    from omni_core import AsyncOmniEngine, PipelineConfig

    engine = AsyncOmniEngine(
        PipelineConfig.from_yaml_text(CHAIN), settings=omni_settings, plugins=plugin_host
    )
    thread = engine._runtime.thread
    del engine
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


CHILD = textwrap.dedent("""
    import asyncio, json, sys, time
    from omni_core import AsyncOmniEngine, PipelineConfig
    config = PipelineConfig.from_yaml_text('''
    name: procs
    stages:
      - {id: 0, name: a, kind: scripted, replicas: 2, engine_args: {num_tokens: 1000, delay_s: 0.01, process: true}}
      - {id: 1, name: b, kind: scripted, replicas: 2, inputs: [0], engine_args: {process: true}, final_output: true}
    ''')

    async def main():
        engine = await AsyncOmniEngine.create(config)
        gen = engine.generate("x")
        task = asyncio.ensure_future(gen.__anext__())
        health = engine.health()["stages"]
        pids = [p for s in health.values() for p in s["pids"]]
        print(json.dumps(pids), flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
""")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie is dead
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_stage_process_outlives_a_killed_parent(sig, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    try:
        line = proc.stdout.readline()
        pids = json.loads(line)
        assert len(pids) == 4 and all(isinstance(p, int) for p in pids)
        assert not any(_gone(p) for p in pids)
        proc.send_signal(sig)
        proc.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(_gone(p) for p in pids):
            time.sleep(0.05)
        assert [p for p in pids if not _gone(p)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
