"""The loop-lag watchdog: a stage's code blocking the orchestrator loop is named in a WARNING."""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from omni_core.config.settings import OmniSettings
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
