"""The ``wan2.1-t2v`` / ``wan2.2-t2v`` pipelines: prompt → UMT5 (torch) → DiT + VAE (wan)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core import PipelineConfig

if TYPE_CHECKING:
    from omni_core.plugin import PluginHost

DEFAULT_GUIDANCE = 5.0  # WanPipeline's guidance_scale
SECTION_CFG = "cfg"  # omni-cfg's pipeline section


def wan_pipeline(
    host: PluginHost,
    version: str,
    model: str | None = None,
    steps: int = 4,
    size: int = 32,
    frames: int = 5,
    text_len: int = 32,
) -> PipelineConfig:
    """Tiny defaults (32x32, 5 frames, 4 steps). Unguided unless a request asks for guidance
    (``extra["cfg"]``: ``omni run wan2.1-t2v --negative-prompt ... [--guidance S]``); then
    ``ε_neg + s (ε - ε_neg)`` at WanPipeline's default 5 unless the request says. With
    omni-cfg missing or disabled on ``host`` such a request is refused (400).

    ``text_len``: the prompt embeddings' padded length (``WanPipeline``'s
    ``max_sequence_length``, 512 there and for real checkpoints). The tiny model uses 32: with
    a few real tokens among 512 zero-padded ones its DiT hardly reads the text (a different
    negative prompt moved frames by under one level), with 32 it does."""
    model = model or f"tiny-wan{version}"
    name = f"wan{version}-t2v"
    config: dict[str, Any] = {
        "name": name,
        "requires_plugins": ["wan"],
        "stages": [
            {
                "id": 0,
                "name": "encoder",
                "kind": "torch",
                "engine_args": {
                    "engine": "omni_wan.encoder:build",
                    "model": model,
                    "options": {"max_sequence_length": text_len},
                },
            },
            {
                "id": 1,
                "name": "dit",
                "kind": "wan",
                "inputs": [0],
                "bridge": "wan-embeds",
                "engine_args": {
                    "model": model,
                    "steps": steps,
                    "height": size,
                    "width": size,
                    "num_frames": frames,
                },
                "final_output": True,
                "final_output_type": "latent",
            },
        ],
    }
    if SECTION_CFG in host.config_sections():
        config[SECTION_CFG] = {
            "stage": "dit",
            "enabled": False,
            "guidance_scale": DEFAULT_GUIDANCE,
            "negative_prompt": "",
            "timeout_s": 60,
        }
    return PipelineConfig.from_dict(config, source=f"<pipeline {name} (omni-wan)>")
