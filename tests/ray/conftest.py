"""Ray runtime tests: they need the ray extra (``./setup.sh`` installs it). CI sets
OMNI_REQUIRE_RAY=1 so a missing Ray fails there instead of skipping.

One local Ray serves the whole directory (started once: ~5 s); engines join it, so their
shutdown leaves it running and the state API can check their actors afterwards.
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
