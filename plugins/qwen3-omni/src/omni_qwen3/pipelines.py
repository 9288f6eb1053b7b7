"""omni-qwen3's pipelines, built in Python: the vLLM stage's ``env`` carries omni-qwen's shim
directory (torchvision is missing here; Qwen3-Omni fails the same two ways as Qwen2.5-Omni).

* ``qwen3-omni-thinker``: the MoE thinker on vLLM (text, audio, image in; text out).
"""

from __future__ import annotations

from typing import Any

from omni_qwen import compat

from omni_core import PipelineConfig

THINKER_PIPELINE = "qwen3-omni-thinker"
TINY_MODEL = "tiny-qwen3-omni"


def thinker_engine_args(model: str = TINY_MODEL, hidden_layer: int | None = None) -> dict[str, Any]:
    """``engine_args`` of a Qwen3-Omni thinker on the ``vllm`` kind.

    vLLM maps ``Qwen3OmniMoeForConditionalGeneration`` to its thinker-only model (the talker's
    and code2wav's weights are skipped); on CPU its MoE runs on the ``CPUUnquantizedExperts``
    backend. Audio and one image per prompt; video needs torchvision. With ``hidden_layer`` (the
    talker's ``accept_hidden_layer``) the stage emits, per token, the LM input embeddings and
    transformers' ``hidden_states[hidden_layer]`` (the core's ``layer:K``, from vLLM's auxiliary
    hidden-state outputs), which needs every prompt position computed: prefix caching off.
    """
    env = {"PYTHONPATH": compat.pythonpath_entry()} if compat.needed() else {}
    args: dict[str, Any] = {
        "model": model,
        "max_model_len": 512,
        "dtype": "float32",
        "env": env,
        "engine": {"limit_mm_per_prompt": {"audio": 1, "image": 1, "video": 0}},
    }
    if hidden_layer is None:
        args["engine"]["enable_prefix_caching"] = True
    else:
        args["hidden_states"] = {"layers": ["embeddings", f"layer:{hidden_layer}"]}
    return args


def thinker_pipeline(model: str = TINY_MODEL) -> PipelineConfig:
    """One vLLM stage: text, audio and image in, text out (greedy unless a request says)."""
    return PipelineConfig.from_dict(
        {
            "name": THINKER_PIPELINE,
            "requires_plugins": ["qwen3"],
            "stages": [
                {
                    "id": 0,
                    "name": "thinker",
                    "kind": "vllm",
                    "engine_args": thinker_engine_args(model),
                    "sampling_params": {"max_tokens": 64, "temperature": 0.0},
                    "final_output": True,
                    "final_output_type": "text",
                }
            ],
        },
        source=f"<pipeline {THINKER_PIPELINE} (omni-qwen3)>",
    )
