"""omni-qwen3-tts's pipelines: talker + code predictor (``torch`` kind, :mod:`.talker`, the text
in) → the 12 Hz decoder (``torch`` kind, :mod:`.decoder`, the frames as they come through a
``stream`` edge; final audio, 24 kHz float32, whole or chunk by chunk for a request asking for
streamed audio).

* ``qwen3-tts``: a custom-voice checkpoint (``--voice`` one of its speakers);
* ``qwen3-tts-design``: a voice-design checkpoint (``extra.instructions`` describes the voice);
* ``qwen3-tts-clone``: a base checkpoint, voice clone in x-vector mode (``extra.ref_audio``: the
  reference speech, base64 audio or ``{samples, sample_rate}``).
"""

from __future__ import annotations

from typing import Any

from omni_core import PipelineConfig

TINY_MODEL = "tiny-qwen3-tts"
PIPELINE = "qwen3-tts"
DESIGN_PIPELINE = "qwen3-tts-design"
CLONE_PIPELINE = "qwen3-tts-clone"
DEFAULT_VOICE = "vivian"  # the custom-voice default (OpenAI's voice names map to it: serving)
EDGE_CHUNK = 4  # talker outputs (one frame each) per hop to the decoder

# The talker's sampling defaults: the checkpoint's generation_config.json (generate()'s), with a
# cap on the frames (12.5 per second of speech) that keeps the tiny model's random talk short; a
# request's own talker params override them.
TALKER_SAMPLING = {
    "temperature": 0.9,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.05,
    "max_tokens": 64,
}


def stages(model: str, model_type: str, voice: str | None) -> list[dict[str, Any]]:
    options: dict[str, Any] = {"model_type": model_type}
    if voice is not None:
        options["voice"] = voice
    return [
        {
            "id": 0,
            "name": "talker",
            "kind": "torch",
            "engine_args": {
                "engine": "omni_qwen3_tts.talker:build",
                "model": model,
                "options": options,
            },
            "sampling_params": dict(TALKER_SAMPLING),
        },
        {
            "id": 1,
            "name": "decoder",
            "kind": "torch",
            "engine_args": {
                "engine": "omni_qwen3_tts.decoder:build",
                "model": model,
                "options": {"model_type": model_type},
            },
            "inputs": [{"stage": 0, "mode": "stream", "chunk": EDGE_CHUNK}],
            "final_output": True,
            "final_output_type": "audio",
        },
    ]


def _pipeline(name: str, stage_list: list[dict[str, Any]]) -> PipelineConfig:
    return PipelineConfig.from_dict(
        {"name": name, "requires_plugins": ["qwen3-tts"], "stages": stage_list},
        source=f"<pipeline {name} (omni-qwen3-tts)>",
    )


def tts_pipeline(model: str = TINY_MODEL) -> PipelineConfig:
    """Custom voice: text + a speaker → speech (``model``: a registered name, a directory)."""
    return _pipeline(PIPELINE, stages(model, "custom_voice", DEFAULT_VOICE))


def design_pipeline(model: str = TINY_MODEL) -> PipelineConfig:
    """Voice design: text + instructions describing the voice → speech."""
    return _pipeline(DESIGN_PIPELINE, stages(model, "voice_design", None))


def clone_pipeline(model: str = TINY_MODEL) -> PipelineConfig:
    """Voice clone (x-vector mode): text + reference speech → speech in its voice."""
    return _pipeline(CLONE_PIPELINE, stages(model, "base", None))
