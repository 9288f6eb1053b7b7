"""A stage process dies with its engine process while it is still starting (building its
engine: imports, weights), not only once it serves (socket EOF)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from omni_core.stage.wire import Call, encode, parent_frames
from omni_core.stage.worker import ORPHANED

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import asyncio, json, sys
from omni_core.stage.process import ProcessStageClient

config, path = json.loads(sys.argv[1]), sys.argv[2]
client = ProcessStageClient("slow", config, env={"PYTHONPATH": path}, start_timeout_s=120)
asyncio.run(client.start())
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for_pid(pidfile: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the worker never started building its engine"
        time.sleep(0.02)
    return int(pidfile.read_text())


@pytest.fixture
def factory(tmp_path: Path) -> Path:
    return tmp_path  # where the engine writes its pid


def config(tmp_path: Path, sleep: float) -> dict:
    return {
        "factory": "tests.stage.engines:slow_build",
        "pidfile": str(tmp_path / "pid"),
        "sleep": sleep,
    }


def test_sigkill_of_the_engine_process_during_startup_leaves_no_stage_process(factory):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, json.dumps(config(factory, 60)), str(ROOT)], cwd=ROOT
    )
    worker = None
    try:
        worker = wait_for_pid(factory / "pid")
        assert alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 2.0
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(worker), "the stage process outlived its engine process"
    finally:
        parent.kill()
        parent.wait()
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)


def run_worker(
    tmp_path: Path, parent_pid: int, until: threading.Event | None = None
) -> tuple[socket.socket, list, threading.Thread]:
    """``python -m omni_core.stage.worker`` with its socket, started from a thread that ends
    when ``until`` is set (the death signal follows that thread, not the process)."""
    ours, theirs = socket.socketpair()
    started: list[subprocess.Popen] = []

    def start() -> None:
        started.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "omni_core.stage.worker",
                    str(theirs.fileno()),
                    json.dumps(config(tmp_path, 0.0)),
                    str(parent_pid),
                ],
                pass_fds=[theirs.fileno()],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        )
        if until is not None:
            until.wait(30)

    thread = threading.Thread(target=start)
    thread.start()
    while not started and thread.is_alive():
        time.sleep(0.01)
    theirs.close()
    return ours, started, thread


def test_a_worker_whose_parent_is_not_the_expected_one_ends_before_building(factory):
    sock, [proc], _ = run_worker(factory, parent_pid=1)  # not its parent: "reparented"
    try:
        assert proc.wait(timeout=30) == ORPHANED
        assert not (factory / "pid").exists()  # no engine was built
    finally:
        sock.close()
        proc.kill()
        proc.wait()


def test_a_built_worker_outlives_the_thread_that_started_it(factory):
    """Once built, the worker's lifeline is its socket: the death signal (which follows the
    parent *thread*) is cleared, so the orchestrator's thread layout cannot kill a replica."""
    built = threading.Event()
    sock, [proc], thread = run_worker(factory, os.getpid(), until=built)
    try:
        sock.settimeout(30)
        sock.sendall(encode(Call(0, "ping", None, None)))
        buf = bytearray()
        frames: list = []
        while not frames:
            data = sock.recv(1 << 16)
            assert data, "the worker closed its socket"
            buf += data
            frames = list(parent_frames(buf))
        assert frames[0].ok and frames[0].value == proc.pid  # built and serving
        built.set()
        thread.join()  # the thread that started the worker ends
        time.sleep(0.3)
        assert proc.poll() is None, "the worker died with the thread that started it"
        sock.close()  # EOF: the worker ends cleanly
        assert proc.wait(timeout=30) == 0
    finally:
        built.set()
        sock.close()
        proc.kill()
        proc.wait()
