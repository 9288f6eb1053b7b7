"""The loop-lag watchdog: a stage's code blocking the orchestrator loop is named in a WARNING."""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
import time

import pytest

from omni_core import SamplingParams
from omni_core.config.settings import OmniSettings
from omni_core.orchestrator import watchdog
from tests.helpers import collect

CODE = textwrap.dedent("""
    import time

    async def hog(prompt, params):  # async, yet blocks: the user's bug the watchdog names
        time.sleep(0.4)
        return "done"
""")

PIPELINE = """
name: hog
stages:
  - {id: 0, name: hogger, kind: python, engine_args: {callable: "hog_engines:hog"}, final_output: true}
"""

WATCHDOG = "omni_core.orchestrator.watchdog"


@pytest.fixture
def hog_module(tmp_path):
    (tmp_path / "hog_engines.py").write_text(CODE)
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop("hog_engines", None)


async def test_a_blocked_loop_is_reported_naming_the_stage(make_engine, hog_module, caplog):
    caplog.set_level(logging.WARNING, logger=WATCHDOG)
    [out] = await collect(make_engine(PIPELINE), "x")
    assert out.text == "done"
    named = [r for r in caplog.records if r.name == WATCHDOG and "hogger" in r.getMessage()]
    assert len(named) == 1 and named[0].levelno == logging.WARNING  # one per stall
    message = named[0].getMessage()
    assert "orchestrator loop is blocked" in message
    assert "stage 'hogger' replica 0" in message
    assert "hog_engines.py" in message and "in hog" in message


async def test_zero_turns_the_watchdog_off(make_engine, hog_module, caplog, omni_settings):
    caplog.set_level(logging.WARNING, logger=WATCHDOG)
    settings = omni_settings.model_copy(update={"loop_lag_warn_s": 0.0})
    assert isinstance(settings, OmniSettings)
    [out] = await collect(make_engine(PIPELINE, settings=settings), "x")
    assert out.text == "done"
    assert [r for r in caplog.records if r.name == WATCHDOG] == []


class CountingClock:
    """The watchdog module's ``time``, counting ``monotonic()`` reads: every beat of its loop
    timer and every check of its thread reads the clock once."""

    def __init__(self) -> None:
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return time.monotonic()


async def test_an_idle_engine_s_watchdog_sleeps_and_wakes_for_work(
    make_engine, hog_module, caplog, monkeypatch
):
    """Idle, neither the loop's timer nor the thread wakes up (they used to, 20 times a second
    each: 12 clock reads in 0.3 s on a loaded box); a request wakes them (the stall is named),
    and they sleep again once it is done (up to 3 reads allowed: a late last beat and check)."""
    caplog.set_level(logging.WARNING, logger=WATCHDOG)
    clock = CountingClock()
    monkeypatch.setattr(watchdog, "time", clock)
    engine = make_engine(PIPELINE)
    await asyncio.sleep(0.1)  # started: the first beat finds no request
    clock.reads = 0
    await asyncio.sleep(0.3)
    assert clock.reads <= 3, f"an idle engine's watchdog woke {clock.reads} times in 0.3 s"
    [out] = await collect(engine, "x")
    assert out.text == "done"
    assert [r for r in caplog.records if "stage 'hogger' replica 0" in r.getMessage()]
    await asyncio.sleep(0.1)  # the beat after the request finds none
    clock.reads = 0
    await asyncio.sleep(0.3)
    assert clock.reads <= 3, f"the watchdog woke {clock.reads} times in 0.3 s after a request"


class _Sink:
    """An ``open_run`` stream: outputs pushed on the orchestrator's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: list = []

    def push(self, item) -> None:
        self.items.append(item)


async def test_a_run_opened_by_a_task_wakes_the_sleeping_watchdog(make_engine, hog_module, caplog):
    """A run a subclass opens itself (``open_run``, as duplex sessions do from their own task) is
    registered outside any inbox batch: it wakes the idle watchdog too, so its stage blocking
    the loop is named (before the fix the watchdog slept through it)."""
    caplog.set_level(logging.WARNING, logger=WATCHDOG)
    engine = make_engine(PIPELINE)
    orch = engine._runtime.orchestrator
    await asyncio.sleep(0.2)  # started and idle: the watchdog sleeps
    assert orch._watchdog._timer is None

    async def open_own_run() -> None:
        await asyncio.sleep(0)  # a task of the loop's, not a message from the inbox
        await orch.open_run("own-1", "x", {0: SamplingParams()}, _Sink(orch.loop))

    asyncio.run_coroutine_threadsafe(open_own_run(), orch.loop).result(timeout=10)
    await asyncio.sleep(0.8)  # the stage blocks the loop 0.4 s
    assert [r for r in caplog.records if "stage 'hogger' replica 0" in r.getMessage()]
