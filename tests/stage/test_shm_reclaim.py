"""Shared-memory segments are named after the process that takes them; those a SIGKILLed engine
left behind are reclaimed when an engine starts again, and a live process's never are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from omni_core.stage import dataplane
from omni_core.stage.dataplane import (
    SharedMemoryDataPlane,
    pid_namespace,
    reclaim_segments,
)
from omni_core.stage.process import ProcessStageClient

ROOT = Path(__file__).resolve().parents[2]


def killed_engine_segment(directory: Path) -> str:
    """The segment an engine process left when it was SIGKILLed between put and take."""
    script = textwrap.dedent(f"""
        import os, signal, numpy as np
        from omni_core.stage.dataplane import SharedMemoryDataPlane
        print(SharedMemoryDataPlane({str(directory)!r}).put(np.zeros(4)).name, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {k: v for k, v in os.environ.items() if k != dataplane.OWNER_ENV}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    name = done.stdout.strip()
    assert (directory / name).exists()
    return name


def test_segments_carry_their_owner_pid_and_namespace(tmp_path, monkeypatch):
    monkeypatch.delenv(dataplane.OWNER_ENV, raising=False)
    plane = SharedMemoryDataPlane(str(tmp_path))
    handle = plane.put(np.arange(3))
    assert handle.name.startswith(f"omni-{os.getpid()}-{pid_namespace()}-")
    assert plane.take(handle).tolist() == [0, 1, 2]
    monkeypatch.setenv(dataplane.OWNER_ENV, "4242")  # a stage process: its engine process takes
    assert SharedMemoryDataPlane(str(tmp_path)).prefix.startswith("omni-4242-")


@pytest.mark.skipif(pid_namespace() == "0", reason="needs /proc/self/ns/pid")
def test_reclaim_removes_dead_owners_segments_only(tmp_path):
    dead = killed_engine_segment(tmp_path)
    ns = pid_namespace()
    live = f"omni-{os.getppid()}-{ns}-{'a' * 16}"  # a live process (not this one)
    ours = f"omni-{os.getpid()}-{ns}-{'b' * 16}"
    foreign = dead.replace(f"-{ns}-", "-1234abc-")  # another pid namespace: not ours to judge
    kept = [live, ours, foreign, "omni-0123456789abcdef", "unrelated"]
    for name in kept:
        (tmp_path / name).write_bytes(b"x")
    assert reclaim_segments(str(tmp_path)) == [dead]
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert reclaim_segments(str(tmp_path)) == []


@pytest.mark.skipif(pid_namespace() == "0", reason="needs /proc/self/ns/pid")
async def test_a_restarted_engine_reclaims_and_its_stages_segments_are_its_own(
    tmp_path, monkeypatch
):
    """An engine process SIGKILLed between a stage's put and its take leaked a segment: the next
    engine's start-up removes it. Its own stage process names segments after it (their taker)."""
    leaked = killed_engine_segment(tmp_path)
    stage_directory = SharedMemoryDataPlane().directory  # where the stage process puts
    monkeypatch.setattr(dataplane, "SHM_DIR", str(tmp_path))
    client = ProcessStageClient(
        "putter", {"factory": "tests.stage.engines:putter"}, env={"PYTHONPATH": str(ROOT)}
    )
    await client.start()
    try:
        assert not (tmp_path / leaked).exists()
        name = await client.collective_rpc("put", (), {})
        assert name.startswith(f"omni-{os.getpid()}-{pid_namespace()}-")
        SharedMemoryDataPlane(stage_directory).take(dataplane.TensorHandle(name, (8,), "uint8"))
    finally:
        await client.shutdown()
