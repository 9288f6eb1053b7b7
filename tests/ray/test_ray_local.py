"""The local Ray the ``ray`` runtime starts listens on loopback only and goes away with its
driver when the driver is SIGKILLed (its supervisor takes the whole process tree down). One local
Ray, in a subprocess driver; the stop at shutdown is checked on the directory's shared Ray
(conftest) and by ``omni run`` (test_ray_tiny_omni)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from omni_core.errors import OmniError, StartupError
from omni_core.stage.ray_local import LocalRay, descendants, exposed_listeners
from tests.ray.helpers import clean_env, import_psutil

try:
    psutil = import_psutil()
except ImportError:  # no Ray: the directory's conftest skips these tests
    psutil = None

DRIVER = '''
import asyncio, json, sys
import ray, psutil
from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.engine.factory import create_engine

PIPELINE = """
name: ray-local
runtime: ray
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
"""


def run_engine():
    config = PipelineConfig.from_yaml_text(PIPELINE, source="<driver>")
    engine = create_engine(config, settings=OmniSettings(startup_timeout_s=120.0))

    async def go():
        return [o async for o in engine.generate("x")]

    outs = asyncio.run(go())
    local = engine._runtime.stages.backend.local
    procs = [psutil.Process(pid) for pid in local.pids()]
    state = {
        "finish": outs[-1].finish_reason,
        "address": local.address,
        "procs": [[p.pid, p.create_time(), p.name()] for p in procs],
    }
    return engine, state


def report(tag, state):
    print(tag, json.dumps(state), flush=True)
    sys.stdin.readline()  # the test looks, then kills the driver


engine, state = run_engine()
report("RUNNING", state)  # the test SIGKILLs the driver here
'''

pytestmark = pytest.mark.timeout(300)


def read_report(driver: subprocess.Popen[str], tag: str) -> dict:
    """The driver's next ``tag`` line (a hang ends at the test's timeout)."""
    assert driver.stdout is not None
    while line := driver.stdout.readline():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1 :])
    raise AssertionError(f"driver exited ({driver.wait()}) before {tag}")


def alive(procs: list[list]) -> list[str]:
    """Names of the recorded processes still running (same pid, same start time, no zombie)."""
    out = []
    for pid, created, name in procs:
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid}:{name}")
        except psutil.NoSuchProcess:
            pass
    return out


def listening(pids: list[int]) -> set[tuple[str, int]]:
    out = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                out.add((conn.laddr.ip, conn.laddr.port))
    return out


def still_listening(sockets: set[tuple[str, int]]) -> set[tuple[str, int]]:
    now = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    return sockets & now


def check_running(state: dict, driver_pid: int) -> set[tuple[str, int]]:
    """Ray's whole tree is under the supervisor, and it and the driver listen on loopback only."""
    assert state["finish"] == "stop"
    assert state["address"].startswith("127.0.0.1:")
    names = [name for _, _, name in state["procs"]]
    # the services, the agents (what outlived a killed driver before) and the two stage actors
    for service in ("gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"):
        assert service in names, names
    assert sum(name.startswith("ray::StageActor") for name in names) == 2, names
    pids = [pid for pid, _, _ in state["procs"]] + [driver_pid]
    sockets = listening(pids)
    assert len(sockets) >= 10  # GCS, raylet, dashboard, agents, metrics, workers, the driver
    assert {ip for ip, _ in sockets} <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, sockets
    return sockets


def test_local_ray_is_on_loopback_and_dies_with_a_killed_driver():
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    procs: list[list] = []
    try:
        state = read_report(driver, "RUNNING")
        procs = state["procs"]
        sockets = check_running(state, driver.pid)
        driver.kill()  # SIGKILL: no shutdown code runs in the driver
        driver.wait()
        deadline = time.monotonic() + 30.0
        while alive(procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(procs) == []
        assert still_listening(sockets) == set()
    finally:
        driver.kill()
        for entry in alive(procs):  # never leave a Ray behind, even on failure
            os.kill(int(entry.split(":")[0]), 9)


def test_exposed_listeners_names_sockets_beyond_loopback():
    wide, local = socket.socket(), socket.socket()
    try:
        wide.bind(("0.0.0.0", 0))
        local.bind(("127.0.0.1", 0))
        for s in (wide, local):
            s.listen()
        exposed = exposed_listeners([os.getpid()])
        assert f"{os.getpid()}:0.0.0.0:{wide.getsockname()[1]}" in exposed
        assert not any(e.endswith(f":{local.getsockname()[1]}") for e in exposed)
    finally:
        wide.close()
        local.close()


def test_descendants_follow_the_whole_tree():
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & (sleep 30; true) & wait"])
    try:
        deadline = time.monotonic() + 10

        def names(pids: list[int]) -> list[str]:
            return sorted(psutil.Process(pid).name() for pid in pids)

        # until both forks exec'd sleep (a fork is named "sh" until then)
        while time.monotonic() < deadline:
            found = descendants(shell.pid)
            if len(found) == 3 and names(found) == ["sh", "sleep", "sleep"]:
                break
            time.sleep(0.05)
        # two sleeps and the subshell between the shell and one of them
        assert len(found) == 3
        assert names(found) == ["sh", "sleep", "sleep"]
        assert shell.pid not in found
    finally:
        for pid in descendants(shell.pid):
            os.kill(pid, 9)
        shell.kill()
        shell.wait()


def test_a_local_ray_that_cannot_start_is_a_startup_error():
    local = LocalRay(num_cpus=-1, start_timeout_s=60.0)  # Ray refuses negative CPUs
    with pytest.raises(StartupError, match="could not start a local Ray: ValueError") as info:
        local.start()
    assert isinstance(info.value, OmniError)
    assert local.process is not None and local.process.returncode == 1
    assert local.pids() == []
