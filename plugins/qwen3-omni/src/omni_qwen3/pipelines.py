"""omni-qwen3's pipelines, built in Python: the vLLM stage's ``env`` carries omni-qwen's shim
directory (torchvision is missing here; Qwen3-Omni fails the same two ways as Qwen2.5-Omni).

* ``qwen3-omni-thinker``: the MoE thinker on vLLM (text, audio, image in; text out).
* ``qwen3-omni``: thinker (vLLM, the embeddings and ``layer:accept_hidden_layer`` per token,
  final text) → talker + code predictor (``torch`` kind, :mod:`omni_qwen3.talker`, fed through
  a ``stream`` edge and the ``qwen3-omni-talker`` bridge) → code2wav (``torch`` kind,
  :mod:`omni_qwen3.vocoder`, the frames as they come through a ``stream`` edge and the
  ``qwen3-omni-code2wav`` bridge, which opens it even for no frames: zero-length audio; final audio,
  24 kHz float32: whole utterances, or chunk by chunk for a request asking for streamed audio).
"""

from __future__ import annotations

from typing import Any

from omni_qwen.api import SpeechStages, qwen_pipeline, thinker_stage

from omni_core import ConfigError, PipelineConfig
from omni_qwen3.bridge import CODE2WAV_BRIDGE
from omni_qwen3.build import ACCEPT_LAYER  # tiny-qwen3-omni's (the real model's: 24)
from omni_qwen3.vllm_plugin import ARCHITECTURE

THINKER_PIPELINE = "qwen3-omni-thinker"
PIPELINE = "qwen3-omni"
TALKER_BRIDGE = "qwen3-omni-talker"
CODE2WAV_EDGE_CHUNK = 4  # talker frames per hop to code2wav
TINY_MODEL = "tiny-qwen3-omni"


def thinker_engine_args(
    model: str = TINY_MODEL, hidden_layer: int | None = None, compiled: bool = False
) -> dict[str, Any]:
    """``engine_args`` of a Qwen3-Omni thinker on the ``vllm`` kind.

    vLLM maps ``Qwen3OmniMoeForConditionalGeneration`` to its thinker-only model (the talker's
    and code2wav's weights are skipped); on CPU its MoE runs on the ``CPUUnquantizedExperts``
    backend. Audio and one image per prompt; video needs torchvision. With ``hidden_layer`` (the
    talker's ``accept_hidden_layer``) the stage emits, per token, the LM input embeddings and
    transformers' ``hidden_states[hidden_layer]`` (the core's ``layer:K``, from vLLM's auxiliary
    hidden-state outputs), which needs every prompt position computed: prefix caching off.
    With ``compiled`` (and a ``hidden_layer``) vLLM compiles the language model
    (``enforce_eager: false``) and the stage runs omni-qwen3's :class:`~omni_qwen3.tap.TapThinker`
    (``hf_overrides``: its architecture and the layer), whose aux layer is set at construction:
    the compiled hidden-layer route (docs/models.md). The rest is omni-qwen's Qwen2.5-Omni
    thinker's (its shim's directory on ``PYTHONPATH``).
    """
    from omni_qwen.api import thinker_engine_args as qwen_thinker_args

    # omni-qwen's thinker args (its shim on PYTHONPATH, the same limits), another layer kept
    args = qwen_thinker_args(model, hidden_states=hidden_layer is not None)
    if hidden_layer is not None:
        args["hidden_states"] = {"layers": ["embeddings", f"layer:{hidden_layer}"]}
    if compiled:
        if hidden_layer is None:
            raise ConfigError(["thinker_engine_args: compiled=True needs a hidden_layer"])
        args["engine"]["enforce_eager"] = False
        args["engine"]["hf_overrides"] = {
            "architectures": [ARCHITECTURE],
            "omni_aux_layers": [hidden_layer],
        }
    return args


def thinker_pipeline(model: str = TINY_MODEL) -> PipelineConfig:
    """One vLLM stage: text, audio and image in, text out (greedy unless a request says)."""
    stages = [thinker_stage(thinker_engine_args(model))]
    return qwen_pipeline(THINKER_PIPELINE, "qwen3", stages, "omni-qwen3")


# The talker's sampling defaults: transformers' generate() (talker_* arguments), with a cap on
# the frames (12.5 per second of speech) that keeps the tiny model's never-ending random talk
# short; a request's own talker params override them.
TALKER_SAMPLING = {
    "temperature": 0.9,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.05,
    "max_tokens": 64,
}


SPEECH = SpeechStages(
    "omni_qwen3.talker:build",
    TALKER_BRIDGE,
    TALKER_SAMPLING,
    "code2wav",
    "omni_qwen3.vocoder:build",
    CODE2WAV_EDGE_CHUNK,
)


def omni_pipeline(
    model: str = TINY_MODEL,
    edge: str = "stream",
    hidden_layer: int = ACCEPT_LAYER,
    compiled: bool = False,
) -> PipelineConfig:
    """Thinker → talker + code predictor → code2wav on one Qwen3-Omni checkpoint (``model``: a
    registered name, a local directory or a hub id; ``hidden_layer``: its talker's
    ``accept_hidden_layer``). ``edge``: how the talker follows the thinker, ``stream`` (as the
    thinker speaks, two tokens behind) or ``on_finish`` (once the reply is whole); ``compiled``:
    the thinker compiled, its layer through :class:`~omni_qwen3.tap.TapThinker`."""
    args = thinker_engine_args(model, hidden_layer=hidden_layer, compiled=compiled)
    stages = SPEECH.stages(model, args, edge)
    # a talker ending without a frame still gets code2wav's (zero-length) audio: no null audio
    stages[2]["bridge"] = CODE2WAV_BRIDGE
    return qwen_pipeline(PIPELINE, "qwen3", stages, "omni-qwen3")
