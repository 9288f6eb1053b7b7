"""Fixtures of the omni-wan tests (the testing kit's come from omni_core.testing). Torch runs on
one thread in this process; the tiny checkpoints are built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_core.testing.tiers import tier_directory

# torch, transformers and diffusers come with ./setup.sh: without them these tests are skipped,
# except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the testing kit's one gate).
tier_directory(__file__, "engine", "diffusers")

pytest_plugins = ["omni_core.testing"]


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def wan_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("omni-cache")


@pytest.fixture(scope="session")
def tiny_wan(wan_cache: Path) -> dict[str, Path]:
    """The built ``tiny-wan2.1`` and ``tiny-wan2.2`` folders, resolved through the registry."""
    from omni_core import OmniSettings
    from omni_core.models import ensure_model
    from omni_core.plugin import PluginHost

    host = PluginHost.create(OmniSettings())
    return {v: ensure_model(f"tiny-wan{v}", wan_cache, host) for v in ("2.1", "2.2")}
