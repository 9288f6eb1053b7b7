"""The built-in ``tiny-image`` pipeline on real engines (vLLM encoder, diffusion), guided.

One module-scoped engine (real engines are slow to start); the plugin is registered as ``cfg``.
"""

from __future__ import annotations

import asyncio

import omni_cfg.plugin as cfg_plugin
import pytest

from omni_core import AsyncOmniEngine, OmniSettings, PluginHost
from omni_core.media import Image


@pytest.fixture(scope="module")
def image_engine():
    settings = OmniSettings()
    host = PluginHost.create(settings, load_entry_points=False, extra_plugins=[("cfg", cfg_plugin)])
    engine = AsyncOmniEngine("tiny-image", settings=settings, plugins=host)
    yield engine
    engine.shutdown()


def pixels(engine, scale, negative):
    # on the guided stage: a per-stage mapping replaces that stage's defaults (the encoder's
    # greedy max_tokens: 8 must stay)
    params = {"dit": {"extra": {"cfg": {"guidance_scale": scale, "negative_prompt": negative}}}}

    async def go():
        return [o async for o in engine.generate("a red square", sampling_params=params)]

    outs = asyncio.run(go())
    assert outs[-1].finished and outs[-1].finish_reason == "stop", outs[-1].error
    assert isinstance(outs[-1].payload, Image)
    return outs[-1].payload.pixels


def test_negative_prompt_reaches_the_denoiser_only_when_guided(image_engine):
    guided = cfg_plugin.tracker_of(image_engine._runtime.orchestrator.port)
    assert guided is not None  # tiny-image is guided as soon as the plugin is installed
    assert (pixels(image_engine, 3.0, "dark blur") != pixels(image_engine, 3.0, "sharp")).any()
    assert (pixels(image_engine, 1.0, "dark blur") == pixels(image_engine, 1.0, "sharp")).all()
    assert (pixels(image_engine, 3.0, "") != pixels(image_engine, 1.0, "")).any()  # default ""
    assert image_engine.num_active_requests == 0 and len(guided) == 0
