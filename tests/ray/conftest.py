"""Ray runtime tests: they need the ray extra (``./setup.sh`` installs it). CI sets
OMNI_REQUIRE_RAY=1 so a missing Ray fails there instead of skipping.

One local Ray serves the whole directory (started once: ~5 s), the way the runtime starts its
own: on loopback, under a supervisor (``omni_core.stage.ray_local``), so a killed pytest leaves
no Ray behind. Engines join it, so their shutdown leaves it running and the state API can check
their actors afterwards.
"""

from __future__ import annotations

import os

import pytest

from tests.optional import require_installed

pytest_collection_modifyitems = require_installed(
    "ray", "OMNI_REQUIRE_RAY", "tests/ray", "pip install 'omni-core[ray]'"
)


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
