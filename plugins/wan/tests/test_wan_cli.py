"""``omni run wan2.1-t2v`` as a user runs it (a subprocess): an MP4 with the asked frame count,
guidance through omni-cfg's ``--negative-prompt``, a bad frame count as exit 2 naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omni_wan.video import read_mp4


def omni(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    env["OMNI_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "omni_core.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.timeout(600)
def test_run_writes_an_mp4_of_the_asked_frames(wan_cache, tiny_wan, tmp_path):
    done = omni(
        *("run", "wan2.1-t2v", "--prompt", "a red cat", "--negative-prompt", "blurry"),
        *("--frames", "9", "--fps", "8", "--video-size", "48x32", "-o", str(tmp_path)),
        cache=wan_cache,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("*.mp4")
    assert f"video: {path} (48x32, 9 frames at 8 fps)" in done.stdout
    frames, fps = read_mp4(path.read_bytes())
    assert frames.shape == (9, 32, 48, 3) and fps == 8
    bad = omni("run", "wan2.1-t2v", "--frames", "6", cache=wan_cache)
    assert bad.returncode == 2 and "extra['wan'].num_frames: 6 frames" in bad.stderr + bad.stdout
