"""Builder of the tiny Qwen3-TTS checkpoints: the real ``Qwen3TTSForConditionalGeneration``
(talker + code predictor, the ECAPA speaker encoder for ``base``) and the 12 Hz speech tokenizer
(Mimi encoder + causal decoder with the real x1920 upsampling) at tiny sizes, random weights from
fixed seeds, built locally (no hub), byte-identical across builds.

One folder per model type: ``custom_voice/``, ``voice_design/``, ``base/``, each what the official
``Qwen3TTSModel.from_pretrained`` reads (``config.json``, ``model.safetensors``,
``generation_config.json``, tokenizer and processor files, ``speech_tokenizer/``). Sizes and ids
that must agree are checked by :func:`check_config` (docs/models.md, Qwen3-TTS).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omni_core.family import (
    bpe_tokenizer,
    corpus,
    quiet_transformers,
    redraw,
    require_consistent,
    write_checkpoint,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEED = 1234
BPE_VOCAB = 4000
VOCAB = 4096  # == text_vocab_size; the added tokens sit at the real ids' offsets from 4000
# Qwen's added tokens in their real order: <tts_pad> 4028, <tts_text_bos> 4029, <tts_text_eos>
# 4030 (real 151671..151673) are the ids Qwen3-TTS reads.
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>",
    "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eos>", "<tts_text_bos_single>", "<|audio_pad|>",
)  # fmt: skip
CODEBOOK = 64  # decoder codebook == code predictor vocab; talker vocab = CODEBOOK + 1024
GROUPS = 16
HIDDEN = 64  # talker hidden == speaker encoder enc_dim (the x-vector is a codec row)
HEAD_DIM = 32  # one of vLLM's CPU attention sizes; mrope section sums to HEAD_DIM / 2
MODEL_TYPES = ("custom_voice", "voice_design", "base")
LANGUAGES = ("chinese", "english", "german", "japanese", "beijing_dialect")
# speaker -> dialect (False: none); every speaker needs an spk_is_dialect entry
SPEAKERS = {"vivian": False, "ryan": False, "aiden": False, "dylan": "beijing_dialect"}
GENERATION = {  # what the official wrapper reads from generation_config.json
    "do_sample": True,
    "top_k": 50,
    "top_p": 1.0,
    "temperature": 0.9,
    "repetition_penalty": 1.05,
    "subtalker_dosample": True,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "subtalker_temperature": 0.9,
    "max_new_tokens": 2048,
}
_WORDS = (
    "the a an of to and in is it you that he was for on are with as his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up use "
    "hello world voice speech speak say read aloud calm happy sad slow fast deep warm bright "
    "whisper narrator story morning evening weather news today tomorrow please thank welcome "
    "qwen tiny talker predictor codec decoder speaker design clone english chinese sound "
    "assistant user system assistant user system assistant"
).split()


def token_id(token: str) -> int:
    return BPE_VOCAB + SPECIAL_TOKENS.index(token)


def codec_ids(codebook: int = CODEBOOK) -> dict[str, int]:
    """The talker's codec special ids at the real offsets from the codebook size."""
    return {
        "codec_pad_id": codebook + 100,
        "codec_bos_id": codebook + 101,
        "codec_eos_token_id": codebook + 102,
        "codec_think_id": codebook + 106,
        "codec_nothink_id": codebook + 107,
        "codec_think_bos_id": codebook + 108,
        "codec_think_eos_id": codebook + 109,
    }


def build_tokenizer() -> Any:
    return bpe_tokenizer(corpus(_WORDS, seed=20261206), SPECIAL_TOKENS, {}, BPE_VOCAB, VOCAB)


def build_config(model_type: str) -> Any:
    from qwen_tts.core.models import Qwen3TTSConfig

    rope = {"rope_type": "default", "mrope_section": [6, 5, 5], "interleaved": True}
    predictor = {
        "vocab_size": CODEBOOK,
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "num_code_groups": GROUPS,
        "rope_theta": 1000000.0,
        "pad_token_id": None,  # 5.x configs have none, and the model reads it
    }
    languages = {name: CODEBOOK + 200 + i for i, name in enumerate(LANGUAGES)}
    talker = {
        "code_predictor_config": predictor,
        "vocab_size": CODEBOOK + 1024,
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "rope_theta": 1000000.0,
        "rope_scaling": rope,
        "num_code_groups": GROUPS,
        "text_hidden_size": 128,
        "text_vocab_size": VOCAB,
        "pad_token_id": None,
        "codec_language_id": languages,
        "spk_id": (
            {name: CODEBOOK + 300 + i for i, name in enumerate(SPEAKERS)}
            if model_type == "custom_voice"
            else {}
        ),
        "spk_is_dialect": dict(SPEAKERS) if model_type == "custom_voice" else {},
        **codec_ids(),
    }
    speaker = {
        "mel_dim": 128,
        "enc_dim": HIDDEN,
        "enc_channels": [32, 32, 32, 32, 96],
        "enc_attention_channels": 16,
        "enc_res2net_scale": 4,
        "enc_se_channels": 16,
    }
    return Qwen3TTSConfig(
        talker_config=talker,
        speaker_encoder_config=speaker,
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="tiny",
        tts_model_type=model_type,
        im_start_token_id=token_id("<|im_start|>"),
        im_end_token_id=token_id("<|im_end|>"),
        tts_pad_token_id=token_id("<tts_pad>"),
        tts_bos_token_id=token_id("<tts_text_bos>"),
        tts_eos_token_id=token_id("<tts_text_eos>"),
    )


def speech_tokenizer_config() -> Any:
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )

    encoder = {
        "hidden_size": 32,
        "num_filters": 4,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 6, 5, 4],
        "frame_rate": 12.5,
        "codebook_size": CODEBOOK,
        "codebook_dim": 32,
        "vector_quantization_hidden_dimension": 32,  # == codebook_dim (the encoder's RVQ)
        "num_quantizers": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 64,
        "upsample_groups": 32,
        "sliding_window": 250,
    }
    decoder = {
        "codebook_size": CODEBOOK,
        "codebook_dim": 64,
        "hidden_size": 64,
        "latent_dim": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "sliding_window": 8,
        "intermediate_size": 128,
        "num_quantizers": GROUPS,
        "decoder_dim": 64,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
    }
    return Qwen3TTSTokenizerV2Config(
        encoder_config=encoder, decoder_config=decoder, encoder_valid_num_quantizers=GROUPS
    )


def check_config(config: Any, tokenizer: Any) -> None:
    tc, pc = config.talker_config, config.talker_config.code_predictor_config
    require_consistent(
        f"tiny-qwen3-tts {config.tts_model_type}",
        [
            (len(tokenizer) <= tc.text_vocab_size, "text_vocab_size < len(tokenizer)"),
            (pc.vocab_size == CODEBOOK, "code predictor vocab != decoder codebook"),
            (tc.vocab_size - 1024 == CODEBOOK, "codec specials not in the top 1024 ids"),
            (sum(tc.rope_scaling["mrope_section"]) == HEAD_DIM // 2, "mrope sum != head_dim/2"),
            (config.speaker_encoder_config.enc_dim == tc.hidden_size, "enc_dim != talker hidden"),
            (
                all(d is False or d in tc.codec_language_id for d in tc.spk_is_dialect.values()),
                "a dialect is not a codec_language_id key",
            ),
            (
                tokenizer("<|im_start|>assistant\n").input_ids[:1] == [config.im_start_token_id]
                and len(tokenizer("<|im_start|>assistant\n").input_ids) == 3,
                "the assistant role is not 3 tokens",
            ),
        ],
    )


def _fix_config_json(path: Path) -> None:
    """A config saved by transformers 5.19 that the official classes reload: the speaker
    encoder's empty ``model_type`` popped, the talker's rope written back as ``rope_scaling``."""
    data = json.loads(path.read_text())
    data.get("speaker_encoder_config", {}).pop("model_type", None)
    talker = data["talker_config"]
    rope = talker.pop("rope_parameters", None) or talker.get("rope_scaling")
    if rope:
        talker["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
        talker["rope_theta"] = rope.get("rope_theta", talker.get("rope_theta", 1000000.0))
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def randomize_talker(model: Any) -> None:
    redraw(model, (("talker.codec_head.", 0.4), ("", 0.2)), SEED)


def randomize_speech(model: Any) -> None:
    import torch

    redraw(model, (("", 0.1),), SEED + 1)
    with torch.no_grad():  # keep the waveform inside the final clamp(-1, 1) (no saturation)
        model.decoder.decoder[-1].conv.weight.mul_(0.05)


def build_one(out: Path, model_type: str, tokenizer: Any) -> None:
    from qwen_tts.core.models import Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )
    from transformers import EncodecFeatureExtractor

    config = build_config(model_type)
    check_config(config, tokenizer)
    processor = Qwen3TTSProcessor(tokenizer=tokenizer)
    write_checkpoint(
        out, Qwen3TTSForConditionalGeneration, config, SEED, randomize_talker, processor
    )
    _fix_config_json(out / "config.json")
    (out / "generation_config.json").write_text(json.dumps(GENERATION, indent=2) + "\n")
    speech = out / "speech_tokenizer"
    features = EncodecFeatureExtractor(feature_size=1, sampling_rate=24000)
    write_checkpoint(
        speech, Qwen3TTSTokenizerV2Model, speech_tokenizer_config(), SEED, randomize_speech,
        features,
    )  # fmt: skip


def build(out: Path) -> None:
    """Write the three tiny checkpoints under ``out``."""
    from omni_qwen3_tts.shim import import_qwen_tts

    import_qwen_tts()
    out = Path(out)
    with quiet_transformers():
        tokenizer = build_tokenizer()
        for model_type in MODEL_TYPES:
            build_one(out / model_type, model_type, tokenizer)
