"""Ray runtime tests: they need the ray extra (``./setup.sh`` installs it) and carry the ``ray``
marker (omni_core.testing.tiers: skipped without it unless OMNI_REQUIRE_RAY=1, as in CI).

One local Ray serves the whole directory (started once: ~5 s), the way the runtime starts its
own: on loopback, under a supervisor (``omni_core.stage.ray_local``), so a killed pytest leaves
no Ray behind. Engines join it, so their shutdown leaves it running and the state API can check
their actors afterwards.
"""

from __future__ import annotations

import os

import pytest

from omni_core.testing.tiers import tier_directory

tier_directory(__file__, "ray")


@pytest.fixture(scope="session")
def local_ray():
    import ray

    from omni_core.stage.ray_local import LocalRay
    from tests.ray.helpers import import_psutil

    psutil = import_psutil()

    os.environ.pop("RAY_ADDRESS", None)
    local = LocalRay(os.cpu_count() or 1)
    local.start()
    local.join()
    yield ray
    ray.shutdown()
    tree = local.pids()
    assert len(tree) > 10 and local.stop()  # the supervisor stopped, nothing left under it
    left = []
    for pid in tree:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert left == []


@pytest.fixture(scope="session")
def tiny_omni_local(tmp_path_factory):
    """`omni run tiny-omni --seed 7 --runtime local`, once: the reference the Ray runs (one
    node, a simulated cluster) must reproduce: its thinker lines and its WAV's bytes."""
    from tests.ray.helpers import omni_run, thinker_lines

    out = tmp_path_factory.mktemp("tiny-omni-local")
    run = omni_run("tiny-omni", out, "--runtime", "local")
    assert run.returncode == 0, run.stderr[-2000:]
    text = thinker_lines(run.stdout)
    assert text and len(text[0]) > 20
    [wav] = out.glob("*.wav")
    assert "Ray" not in run.stderr
    return {"text": text, "wav": wav.read_bytes()}
