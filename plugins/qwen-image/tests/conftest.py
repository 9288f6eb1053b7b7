"""Fixtures of the omni-qwen-image tests (the testing kit's come from omni_core.testing).

Torch runs on one thread in this process (stable timings on 2 shared cores; the stage processes
pin theirs through ``threads``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_core.testing.tiers import tier_directory

# vLLM, transformers and diffusers come with ./setup.sh: without them these tests are skipped,
# except in CI (OMNI_REQUIRE_VLLM=1), where that is an error (the testing kit's one gate).
tier_directory(__file__, "engine", "vllm", "diffusers")

pytest_plugins = ["omni_core.testing"]


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qi_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by this session's tests (the tiny checkpoint built once)."""
    return tmp_path_factory.mktemp("omni-cache")


@pytest.fixture(scope="session")
def tiny_qi(qi_cache: Path) -> Path:
    """The built ``tiny-qwen-image`` directory, resolved through the plugin registry."""
    from omni_core import OmniSettings
    from omni_core.models import ensure_model
    from omni_core.plugin.hooks import PluginHost

    return ensure_model("tiny-qwen-image", qi_cache, PluginHost.create(OmniSettings()))


@pytest.fixture(scope="session")
def pipe(tiny_qi: Path):
    """diffusers' reference: the whole ``QwenImagePipeline`` on the tiny checkpoint, float32."""
    import torch
    from diffusers import QwenImagePipeline
    from diffusers.utils import logging as df_logging

    df_logging.set_verbosity_error()
    pipe = QwenImagePipeline.from_pretrained(str(tiny_qi), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def tiny_qie(qi_cache: Path) -> Path:
    """The built ``tiny-qwen-image-edit`` directory, resolved through the plugin registry."""
    from omni_core import OmniSettings
    from omni_core.models import ensure_model
    from omni_core.plugin.hooks import PluginHost

    return ensure_model("tiny-qwen-image-edit", qi_cache, PluginHost.create(OmniSettings()))


@pytest.fixture(scope="session")
def edit_pipe(tiny_qie: Path):
    """diffusers' reference: the whole ``QwenImageEditPipeline`` on the tiny checkpoint, float32
    (the family kit's compat shim installed: its processor loads without torchvision)."""
    import torch
    from diffusers import QwenImageEditPipeline
    from diffusers.utils import logging as df_logging

    from omni_core.family.compat import install

    install()
    df_logging.set_verbosity_error()
    pipe = QwenImageEditPipeline.from_pretrained(str(tiny_qie), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def plus_pipe(qi_cache: Path):
    """diffusers' ``QwenImageEditPlusPipeline`` on ``tiny-qwen-image-edit-plus``, float32."""
    import torch
    from diffusers import QwenImageEditPlusPipeline
    from diffusers.utils import logging as df_logging

    from omni_core import OmniSettings
    from omni_core.family.compat import install
    from omni_core.models import ensure_model
    from omni_core.plugin.hooks import PluginHost

    path = ensure_model("tiny-qwen-image-edit-plus", qi_cache, PluginHost.create(OmniSettings()))
    install()
    df_logging.set_verbosity_error()
    pipe = QwenImageEditPlusPipeline.from_pretrained(str(path), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe
