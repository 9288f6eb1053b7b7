"""omni-qwen's pipelines, built in Python: the vLLM stage's ``env`` names the shim's directory
portably (``{package:omni_qwen}/shim``, found where the replica starts).

* ``qwen2.5-omni-thinker``: the thinker on vLLM (text, audio, image in; text out).
* ``qwen2.5-omni``: thinker (vLLM, per-token hidden states, final text) → talker (``torch`` kind,
  :mod:`omni_qwen.talker`, fed token by token through a ``stream`` edge and the
  ``qwen2.5-omni-talker`` bridge) → token2wav (``torch`` kind, :mod:`omni_qwen.token2wav`, the
  talker's codes as they come through a ``stream`` edge, final audio: 24 kHz float32; whole
  utterances, or chunk by chunk for a request with ``extra.audio_stream``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_core import PipelineConfig
from omni_qwen import compat

THINKER_PIPELINE = "qwen2.5-omni-thinker"
PIPELINE = "qwen2.5-omni"
TINY_MODEL = "tiny-qwen2.5-omni"
TALKER_BRIDGE = "qwen2.5-omni-talker"
TOKEN2WAV_BRIDGE = "qwen2.5-omni-token2wav"  # omni_qwen.bridge.talker_codes
TOKEN2WAV_EDGE_CHUNK = 4  # talker codes per hop to token2wav (its chunks are 24)

# The talker's sampling defaults: transformers' generate() (talker_* arguments), with a cap on
# the codes (about 50 per second of speech) that keeps the tiny model's never-ending random talk
# short; a request's own talker params override them.
TALKER_SAMPLING = {
    "temperature": 0.9,
    "top_k": 40,
    "top_p": 0.8,
    "repetition_penalty": 1.05,
    "max_tokens": 256,
}


def thinker_engine_args(model: str = TINY_MODEL, hidden_states: bool = False) -> dict[str, Any]:
    """``engine_args`` of a Qwen2.5-Omni thinker on the ``vllm`` kind.

    vLLM maps ``Qwen2_5OmniForConditionalGeneration`` to its thinker-only model (the talker's and
    token2wav's weights are skipped). Audio and one image per prompt; video needs torchvision.
    Without ``hidden_states`` prefix caching stays on (vLLM's default); with it, the stage emits
    the embeddings and final hidden state of every position (what a talker reads), which needs
    every prompt position computed: prefix caching off.
    """
    env = {"PYTHONPATH": compat.PORTABLE_PYTHONPATH}
    args: dict[str, Any] = {
        "model": model,
        "max_model_len": 512,
        "dtype": "float32",
        "env": env,
        "engine": {"limit_mm_per_prompt": {"audio": 1, "image": 1, "video": 0}},
    }
    if hidden_states:
        args["hidden_states"] = {"layers": ["embeddings", "final"]}
    else:
        args["engine"]["enable_prefix_caching"] = True
    return args


def thinker_stage(engine_args: dict[str, Any]) -> dict[str, Any]:
    """The thinker's stage (id 0) of a Qwen-Omni pipeline: vLLM, greedy 64 tokens unless a
    request says, final text (omni-qwen3's pipelines use it too)."""
    return {
        "id": 0,
        "name": "thinker",
        "kind": "vllm",
        "engine_args": engine_args,
        "sampling_params": {"max_tokens": 64, "temperature": 0.0},
        "final_output": True,
        "final_output_type": "text",
    }


def qwen_pipeline(
    name: str, plugin: str, stages: list[dict[str, Any]], package: str
) -> PipelineConfig:
    """A pipeline named ``name`` that needs ``plugin`` (its source names ``package``)."""
    return PipelineConfig.from_dict(
        {"name": name, "requires_plugins": [plugin], "stages": stages},
        source=f"<pipeline {name} ({package})>",
    )


@dataclass(frozen=True)
class SpeechStages:
    """The talker and vocoder stages that follow a thinker (omni-qwen3's pipeline uses it too):
    the talker's engine (``module:build``), bridge and sampling defaults; the vocoder stage's
    name, engine and ``chunk`` (the talker's codes per hop; final audio)."""

    talker: str
    bridge: str
    sampling: dict[str, Any]
    vocoder: str
    vocoder_engine: str
    chunk: int

    def stages(self, model: str, thinker: dict[str, Any], edge: str) -> list[dict[str, Any]]:
        """Thinker (``thinker``: its vLLM ``engine_args``) → talker → vocoder on ``model``;
        ``edge``: how the talker follows the thinker, ``stream`` or ``on_finish``."""
        if edge not in ("stream", "on_finish"):
            raise ValueError(f"edge must be 'stream' or 'on_finish', not {edge!r}")
        return [
            thinker_stage(thinker),
            {
                "id": 1,
                "name": "talker",
                "kind": "torch",
                "engine_args": {"engine": self.talker, "model": model},
                "inputs": [{"stage": 0, "mode": edge}],
                "bridge": self.bridge,
                "sampling_params": dict(self.sampling),
            },
            {
                "id": 2,
                "name": self.vocoder,
                "kind": "torch",
                "engine_args": {"engine": self.vocoder_engine, "model": model},
                "inputs": [{"stage": 1, "mode": "stream", "chunk": self.chunk}],
                "final_output": True,
                "final_output_type": "audio",
            },
        ]


# token2wav gets the talker's codes as they come: a request with extra.audio_stream is voiced
# chunk by chunk (omni_qwen.stream_wav), others once they are whole
SPEECH = SpeechStages(
    "omni_qwen.talker:build",
    TALKER_BRIDGE,
    TALKER_SAMPLING,
    "token2wav",
    "omni_qwen.token2wav:build",
    TOKEN2WAV_EDGE_CHUNK,
)


# qwen2.5-omni's token2wav streamed mode (requests with extra.audio_stream; whole utterances are
# not affected): a 12-code first chunk with 24 codes of right context, voiced to its end at once,
# its DiT window on a 4-point ODE (12 DiT calls, not 36): first audio after 36 codes and ~110 ms
# of compute instead of 48 and ~230. Its error against the exact path is measured and bounded in
# docs/models.md (tests/test_qwen_token2wav_stream.py); the later chunks are decoded as before.
STREAM_OPTIONS: dict[str, Any] = {
    "first_chunk_frames": 12,
    "first_right_context": 24,
    "first_lookahead": True,
    "first_steps": 4,
}


def thinker_pipeline() -> PipelineConfig:
    """One vLLM stage: text, audio and image in, text out (greedy unless a request says)."""
    return qwen_pipeline(
        THINKER_PIPELINE, "qwen", [thinker_stage(thinker_engine_args())], "omni-qwen"
    )


def omni_pipeline(model: str = TINY_MODEL, edge: str = "stream") -> PipelineConfig:
    """Thinker → talker → token2wav on one Qwen2.5-Omni checkpoint (``model``: a registered
    name, a local directory or a hub id). ``edge``: how the talker follows the thinker,
    ``stream`` (token by token, one token behind) or ``on_finish`` (once the reply is whole)."""
    stages = SPEECH.stages(model, thinker_engine_args(model, hidden_states=True), edge)
    stages[2]["engine_args"]["options"] = {"stream": dict(STREAM_OPTIONS)}
    # a talker ending without a code still gets token2wav's (zero-length) audio: no null audio
    stages[2]["bridge"] = TOKEN2WAV_BRIDGE
    return qwen_pipeline(PIPELINE, "qwen", stages, "omni-qwen")
