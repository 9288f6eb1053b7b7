"""omni-qwen's pipelines, built in Python: the vLLM stage's ``env`` carries the shim's directory,
whose path depends on where this package is installed."""

from __future__ import annotations

from typing import Any

from omni_core.config.pipeline import PipelineConfig
from omni_qwen import compat

THINKER_PIPELINE = "qwen2.5-omni-thinker"


def thinker_engine_args(model: str = "tiny-qwen2.5-omni") -> dict[str, Any]:
    """``engine_args`` of a Qwen2.5-Omni thinker on the ``vllm`` kind.

    vLLM maps ``Qwen2_5OmniForConditionalGeneration`` to its thinker-only model (the talker's and
    token2wav's weights are skipped). Audio and one image per prompt; video needs torchvision.
    Prefix caching stays on (vLLM's default): nothing here reads per-position states yet.
    """
    env = {"PYTHONPATH": compat.pythonpath_entry()} if compat.needed() else {}
    return {
        "model": model,
        "max_model_len": 512,
        "dtype": "float32",
        "env": env,
        "engine": {
            "limit_mm_per_prompt": {"audio": 1, "image": 1, "video": 0},
            "enable_prefix_caching": True,
        },
    }


def thinker_pipeline() -> PipelineConfig:
    """One vLLM stage: text, audio and image in, text out (greedy unless a request says)."""
    return PipelineConfig.from_dict(
        {
            "name": THINKER_PIPELINE,
            "requires_plugins": ["qwen"],
            "stages": [
                {
                    "id": 0,
                    "name": "thinker",
                    "kind": "vllm",
                    "engine_args": thinker_engine_args(),
                    "sampling_params": {"max_tokens": 64, "temperature": 0.0},
                    "final_output": True,
                    "final_output_type": "text",
                }
            ],
        },
        source=f"<pipeline {THINKER_PIPELINE} (omni-qwen)>",
    )
