"""What the port gives a hook author beyond actions: the engine's settings (read-only) and, with
the public ``hand_off``, the way from another thread onto the orchestrator's thread."""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin import hand_off
from tests.helpers import CHAIN


def port_catcher(ports: list[Any]) -> types.ModuleType:
    module = types.ModuleType("port_catcher")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def omni_pipeline_plugin(pipeline: Any, port: Any) -> None:
        ports.append(port)

    module.omni_pipeline_plugin = hookimpl(omni_pipeline_plugin)  # type: ignore[attr-defined]
    return module


async def test_the_port_has_the_engine_s_settings_read_only_and_hands_off_from_threads(
    make_engine, fake_entry_points, omni_settings
):
    ports: list[Any] = []
    fake_entry_points.add("catcher", port_catcher(ports))
    settings = omni_settings.model_copy(update={"max_n": 3})
    engine = make_engine(CHAIN, settings=settings)
    [port] = ports
    assert port.settings is settings  # the engine's, not one read from the environment
    with pytest.raises(AttributeError):
        port.settings = omni_settings
    # from a thread of the plugin's own: deliver runs on the orchestrator's thread, in order
    orchestrator_thread = engine._runtime.orchestrator.loop._thread_id
    delivered: list[tuple[int, int]] = []
    done = threading.Event()

    def deliver(i: int) -> None:
        delivered.append((i, threading.get_ident()))
        if i == 99:
            done.set()

    worker = threading.Thread(target=lambda: [hand_off(port.loop, deliver, i) for i in range(100)])
    worker.start()
    worker.join()
    assert done.wait(10)
    assert [i for i, _ in delivered] == list(range(100))
    assert {thread for _, thread in delivered} == {orchestrator_thread}
