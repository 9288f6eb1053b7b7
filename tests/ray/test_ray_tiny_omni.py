"""tiny-omni (vLLM thinker and talker, vocoder) on Ray: `omni run --runtime ray` prints the same
text and writes the same audio as `--runtime local` for the same seed, and stops the Ray it
started; an external cluster (`ray start --head`) is joined through RAY_ADDRESS and left with no
ALIVE actor."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ray.helpers import clean_env, import_psutil, omni_run, thinker_lines

pytestmark = pytest.mark.timeout(240)


def test_omni_run_tiny_omni_on_ray_matches_local(tmp_path, tiny_omni_local):
    ray = omni_run("tiny-omni", tmp_path / "ray", "--runtime", "ray")
    assert ray.returncode == 0, ray.stderr[-2000:]
    assert thinker_lines(ray.stdout) == tiny_omni_local["text"]
    [wav_ray] = (tmp_path / "ray").glob("*.wav")
    assert wav_ray.read_bytes() == tiny_omni_local["wav"]  # audio through the object store
    assert "started a local Ray on 127.0.0.1:" in ray.stderr
    assert "stopped the local Ray" in ray.stderr
    supervisor = int(re.search(r"supervisor pid (\d+)", ray.stderr).group(1))
    assert not import_psutil().pid_exists(supervisor)  # stopped, and waited for


EXTERNAL = """
import asyncio, sys
from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.engine.factory import create_engine
from omni_core.stage.ray_runtime import alive_actors
config = PipelineConfig.from_yaml_text('''
name: external
runtime: ray
stages:
  - {id: 0, name: a, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: b, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true}
''')
engine = create_engine(config, settings=OmniSettings(startup_timeout_s=120))
async def go():
    return [o async for o in engine.generate("x")]
outs = asyncio.run(go())
ids = {c.actor_id for p in engine._runtime.stages.pools.values() for c in p.clients}
backend = engine._runtime.stages.backend
supervised = backend.local is not None
engine.shutdown()
import ray
print("RESULT", outs[-1].finish_reason, len(ids), backend.owns_ray, backend.alive_after_shutdown,
      alive_actors(ids), ray.is_initialized(), supervised)
"""


def test_external_cluster_from_ray_start_head():
    ray_bin = str(Path(sys.executable).parent / "ray")
    port, dashboard = "6391", "8275"
    temp = tempfile.mkdtemp(prefix="omr-", dir="/tmp")  # Ray's socket paths must stay short
    # token auth would tie the cluster to ~/.ray/auth_token, which other local Rays regenerate
    env = clean_env(RAY_AUTH_MODE="disabled")
    # --block: this process owns the cluster; terminating it stops only this cluster
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=true",
            f"--dashboard-port={dashboard}",
            f"--temp-dir={temp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{dashboard}/api/version", timeout=2)
                break
            except urllib.error.HTTPError:  # up (it asks for Ray's auth token)
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "ray start failed"
                time.sleep(0.5)
        env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
        out = subprocess.run(
            [sys.executable, "-c", EXTERNAL], capture_output=True, text=True, timeout=150, env=env
        )
        assert out.returncode == 0, out.stderr[-2000:]
        [line] = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
        # joined (not owned, no supervisor), 2 actors, none ALIVE after shutdown per the state API
        assert line == "RESULT stop 2 False [] [] True False"
        check = subprocess.run(
            [
                ray_bin,
                "list",
                "actors",
                "--format",
                "json",
                "--address",
                f"http://127.0.0.1:{dashboard}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert check.returncode == 0, check.stderr[-1000:]
        actors = json.loads(check.stdout[check.stdout.index("[") :])
        assert sorted(a["state"] for a in actors) == ["DEAD", "DEAD"], check.stdout
        assert head.poll() is None  # the cluster outlives the engine that joined it
    finally:
        head.terminate()
        head.wait(60)
        shutil.rmtree(temp, ignore_errors=True)
