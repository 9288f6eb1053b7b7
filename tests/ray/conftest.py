"""Ray runtime tests: they need the ray extra (``./setup.sh`` installs it). CI sets
OMNI_REQUIRE_RAY=1 so a missing Ray fails there instead of skipping.

One local Ray serves the whole directory (started once: ~5 s); engines join it, so their
shutdown leaves it running and the state API can check their actors afterwards.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

HAVE_RAY = importlib.util.find_spec("ray") is not None


def pytest_collection_modifyitems(config, items):
    if HAVE_RAY:
        return
    if os.environ.get("OMNI_REQUIRE_RAY") == "1":
        raise pytest.UsageError("OMNI_REQUIRE_RAY=1 but Ray is not installed (run ./setup.sh)")
    skip = pytest.mark.skip(reason="Ray not installed (pip install 'omni-core[ray]')")
    for item in items:
        if "tests/ray" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def local_ray():
    import ray

    os.environ.pop("RAY_ADDRESS", None)
    ray.init(
        address="local",
        num_cpus=os.cpu_count() or 1,
        include_dashboard=True,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield ray
    ray.shutdown()
