"""Builder of ``tiny-qwen3-omni``: the real Qwen3-Omni architecture at tiny sizes.

Everything is built locally and deterministically (no hub, fixed seeds, a corpus generated here):
the ``Qwen3OmniMoeConfig`` (MoE thinker with audio and vision encoders, MoE talker with its code
predictor, causal ConvNet code2wav with the real x1920 upsampling), random weights, a byte-level
BPE tokenizer with Qwen3-Omni's added tokens in their real order, the processor files (Whisper
features, Qwen2-VL image processor at patch 16, the stub video processor) and the chat template.
Sizes and ids that must agree are checked in :func:`check_config` (docs/models.md, Qwen3-Omni).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omni_qwen.api import (
    BPE_VOCAB,
    CHATML_TOKENS,
    CODE_TOKENS,
    ENGLISH_WORDS,
    SEED,
    THINKER_SCALES,
    TINY_AUDIO,
    TINY_VISION,
    VOCAB,
    qwen_tokenizer,
)

from omni_core.family import (
    omni_chat_template,
    omni_processor,
    quiet_transformers,
    redraw,
    require_consistent,
    write_checkpoint,
)
from omni_core.family.compat import install

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# omni-qwen's tiny vocabulary layout: BPE_VOCAB trained entries, the added tokens from there
# on, fillers up to VOCAB (the thinker vocab == len(tokenizer)); SEED for every draw.
# Qwen3-Omni's added tokens in the real order (real ids 151643.., here 4000..).
SPECIAL_TOKENS = (
    *CHATML_TOKENS,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    *CODE_TOKENS,
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eos>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
CODEBOOK = 64  # code2wav codebook == code predictor vocab; talker vocab = CODEBOOK + 1024
NUM_CODE_GROUPS = 4
THINKER_LAYERS = 3
# The talker reads hidden_states[ACCEPT_LAYER] (the input of thinker layer 2) at the prompt's
# multimodal rows. > len(deepstack_visual_indexes): vLLM's aux-layer output is taken after the
# deepstack addition, transformers' hidden_states before it (reference sheet 4.2).
ACCEPT_LAYER = 2
SPEAKERS = ("chelsie", "ethan", "aiden")


def token_id(token: str) -> int:
    """The id of an added token in the tiny vocabulary."""
    return BPE_VOCAB + SPECIAL_TOKENS.index(token)


def codec_ids(codebook: int = CODEBOOK) -> dict[str, int]:
    """The talker's codec special ids at the real offsets from the codebook size."""
    return {
        "codec_pad_id": codebook + 100,
        "codec_bos_id": codebook + 101,
        "codec_eos_token_id": codebook + 102,
        "codec_nothink_id": codebook + 107,
        "codec_think_bos_id": codebook + 108,
        "codec_think_eos_id": codebook + 109,
    }


def speaker_ids(codebook: int = CODEBOOK) -> dict[str, int]:
    return {name: codebook + 253 + i for i, name in enumerate(SPEAKERS)}


# After Qwen3-Omni's template: no default system turn; placeholders between start/end markers.
CHAT_TEMPLATE = omni_chat_template(
    "<|audio_start|><|audio_pad|><|audio_end|>",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|vision_start|><|video_pad|><|vision_end|>",
)

_WORDS = [
    *ENGLISH_WORDS,
    *(
        "hello world audio image video voice speech music picture listen hear see speak answer "
        "question tell describe colour sound tone sine wave second expert router mixture code "
        "assistant user system model tiny random omni qwen thinker talker predictor codec wav"
    ).split(),
]


def build_tokenizer() -> Any:
    """omni-qwen's tiny tokenizer recipe on this builder's corpus (its own words and seed) with
    the Qwen3-Omni added tokens."""
    extra = {
        "audio_token": "<|audio_pad|>",
        "audio_bos_token": "<|audio_start|>",
        "audio_eos_token": "<|audio_end|>",
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_bos_token": "<|vision_start|>",
        "vision_eos_token": "<|vision_end|>",
    }
    return qwen_tokenizer(_WORDS, 20261204, SPECIAL_TOKENS, extra)


def _rope(head_dim: int) -> dict[str, Any]:
    third = head_dim // 2 // 3
    section = [head_dim // 2 - 2 * third, third, third]  # 32 -> [6, 5, 5]; real 128 -> [24,20,20]
    return {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "mrope_section": section,
        "interleaved": True,
        "mrope_interleaved": True,  # vLLM's default is False: silently wrong image logprobs
    }


def build_config(tokenizer: Any) -> Any:
    from transformers import Qwen3OmniMoeConfig

    role = {r: tokenizer.convert_tokens_to_ids(r) for r in ("system", "user", "assistant")}
    mm_ids = {
        "audio_token_id": token_id("<|audio_pad|>"),
        "image_token_id": token_id("<|image_pad|>"),
        "video_token_id": token_id("<|video_pad|>"),
        "audio_start_token_id": token_id("<|audio_start|>"),
        "vision_start_token_id": token_id("<|vision_start|>"),
        "position_id_per_seconds": 25,
    }
    thinker = {
        "text_config": {
            "vocab_size": VOCAB,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": THINKER_LAYERS,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,  # vLLM's CPU attention needs one of its sizes (>= 32)
            "decoder_sparse_step": 1,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "norm_topk_prob": True,
            "max_position_embeddings": 32768,
            "rope_parameters": _rope(32),
            "tie_word_embeddings": False,
            "bos_token_id": token_id("<|endoftext|>"),
            "eos_token_id": token_id("<|im_end|>"),
            "pad_token_id": token_id("<|endoftext|>"),
        },
        "audio_config": {
            **TINY_AUDIO,
            "downsample_hidden_size": 16,
            "n_window": 50,  # vLLM hard-codes 100-frame chunks (2 x n_window)
            "n_window_infer": 800,
        },
        "vision_config": {
            **TINY_VISION,
            "hidden_act": "gelu_pytorch_tanh",
            "patch_size": 16,
            "num_position_embeddings": 64,  # an 8x8 grid
            "deepstack_visual_indexes": [0],
            # undeclared in transformers, read by vLLM:
            "image_size": 128,  # patch * sqrt(num_position_embeddings)
            "apply_vit_abs_pos_embed": True,
        },
        "user_token_id": role["user"],
        "tie_word_embeddings": False,
        **mm_ids,
    }
    talker_text = {
        "vocab_size": CODEBOOK + 1024,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,  # undeclared, read by transformers
        "max_position_embeddings": 32768,
        "rope_parameters": _rope(32),
    }
    predictor = {
        "vocab_size": CODEBOOK,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "num_code_groups": NUM_CODE_GROUPS,
        "max_position_embeddings": 32768,
    }
    talker = {
        "text_config": talker_text,
        "code_predictor_config": predictor,
        "num_code_groups": NUM_CODE_GROUPS,
        "thinker_hidden_size": 128,
        "accept_hidden_layer": ACCEPT_LAYER,
        "spatial_merge_size": 2,  # undeclared, read by transformers
        "speaker_id": speaker_ids(),
        **codec_ids(),
        **mm_ids,
    }
    code2wav = {
        "codebook_size": CODEBOOK,
        "num_quantizers": NUM_CODE_GROUPS,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "sliding_window": 8,
        "decoder_dim": 64,
        "upsample_rates": [8, 5, 4, 3],  # the real ones: 1920 samples per frame, 80 ms
        "upsampling_ratios": [2, 2],
    }
    config = Qwen3OmniMoeConfig(
        thinker_config=thinker,
        talker_config=talker,
        code2wav_config=code2wav,
        im_start_token_id=token_id("<|im_start|>"),
        im_end_token_id=token_id("<|im_end|>"),
        tts_pad_token_id=token_id("<tts_pad>"),
        tts_bos_token_id=token_id("<tts_text_bos>"),
        tts_eos_token_id=token_id("<tts_text_eos>"),
        system_token_id=role["system"],
        user_token_id=role["user"],
        assistant_token_id=role["assistant"],
    )
    check_config(config, tokenizer)
    return config


_SHARED_IDS = (
    "audio_token_id",
    "image_token_id",
    "video_token_id",
    "audio_start_token_id",
    "vision_start_token_id",
    "position_id_per_seconds",
)


def check_config(config: Any, tokenizer: Any = None) -> None:
    """The sizes and ids that must agree (each one broke something when it did not; the
    reference sheet's table of what happens otherwise is in docs/models.md)."""
    th, tk, c2w = config.thinker_config, config.talker_config, config.code2wav_config
    text, tt, cp, vis = th.text_config, tk.text_config, tk.code_predictor_config, th.vision_config
    specials = [*codec_ids().values(), *tk.speaker_id.values()]
    problems = [
        (text.hidden_size == th.audio_config.output_dim, "thinker hidden != audio output_dim"),
        (text.hidden_size == vis.out_hidden_size, "thinker hidden != vision out_hidden_size"),
        (text.hidden_size == tk.thinker_hidden_size, "thinker hidden != talker thinker_hidden"),
        (cp.hidden_size == tt.hidden_size, "code predictor hidden != talker hidden"),
        (c2w.num_quantizers == tk.num_code_groups, "code2wav quantizers != talker code groups"),
        (cp.num_code_groups >= tk.num_code_groups, "predictor code groups < talker's"),
        (cp.vocab_size == c2w.codebook_size, "predictor vocab != code2wav codebook"),
        (tt.vocab_size - 1024 == c2w.codebook_size, "talker vocab - 1024 != codebook"),
        (min(specials) >= tt.vocab_size - 1024 and max(specials) < tt.vocab_size, "codec ids"),
        (tk.accept_hidden_layer < text.num_hidden_layers, "accept_hidden_layer >= thinker layers"),
        (tk.accept_hidden_layer > len(vis.deepstack_visual_indexes), "accept layer in deepstack"),
        (hasattr(tk, "spatial_merge_size"), "talker spatial_merge_size missing"),
        (hasattr(tt, "shared_expert_intermediate_size"), "talker shared expert size missing"),
        (sum(text.rope_parameters["mrope_section"]) * 2 == text.head_dim, "thinker mrope"),
        (sum(tt.rope_parameters["mrope_section"]) * 2 == tt.head_dim, "talker mrope"),
        (text.rope_parameters.get("mrope_interleaved") is True, "mrope_interleaved not set"),
        (text.head_dim in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256), "vLLM CPU head_dim"),
        (
            getattr(vis, "image_size", 0) // vis.patch_size == int(vis.num_position_embeddings**0.5)
            and getattr(vis, "apply_vit_abs_pos_embed", False),
            "vision image_size / apply_vit_abs_pos_embed",
        ),
        (th.audio_config.n_window == 50, "audio n_window != 50"),
        (len(vis.deepstack_visual_indexes) <= text.num_hidden_layers, "deepstack levels"),
        (all(getattr(tk, k) == getattr(th, k) for k in _SHARED_IDS), "talker ids != thinker's"),
        (
            max(config.tts_pad_token_id, config.tts_bos_token_id, config.tts_eos_token_id)
            < text.vocab_size,
            "tts ids outside the thinker vocab",
        ),
    ]
    if tokenizer is not None:
        head = tokenizer("<|im_start|>assistant\n")["input_ids"]
        problems.append(
            (
                head == [config.im_start_token_id, config.assistant_token_id, head[-1]]
                and len(head) == 3,
                "'<|im_start|>assistant\\n' is not 3 tokens",
            )
        )
    require_consistent("tiny-qwen3-omni", problems)


def randomize(model: Any) -> None:
    """Re-draw every matrix (routers included) from a seeded generator at scales where greedy
    output depends on the prompt; the last code2wav conv is scaled below the final clamp."""
    import torch

    redraw(model, (*THINKER_SCALES, ("talker.", 0.2), ("code2wav.", 0.1)), SEED)
    with torch.no_grad():
        last = model.code2wav.decoder[-1]
        weight = last.conv.weight if hasattr(last, "conv") else last.weight
        weight.mul_(0.05)  # the random decoder saturates clamp(-1, 1) otherwise


def build_processor(tokenizer: Any) -> Any:
    from transformers import Qwen3OmniMoeProcessor

    image = {
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "min_pixels": 64 * 64,
        "max_pixels": 128 * 32 * 32,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    video = {"patch_size": 16, "size": {"shortest_edge": 64 * 64, "longest_edge": 128 * 32 * 32}}
    return omni_processor(Qwen3OmniMoeProcessor, tokenizer, CHAT_TEMPLATE, image, video)


def build(out: Path) -> None:
    """Write the whole checkpoint into ``out`` (about 10 MB, a few seconds on 2 cores)."""
    install()
    from transformers import Qwen3OmniMoeForConditionalGeneration

    with quiet_transformers():
        tokenizer = build_tokenizer()
        config = build_config(tokenizer)
        processor = build_processor(tokenizer)
        write_checkpoint(
            out, Qwen3OmniMoeForConditionalGeneration, config, SEED, randomize, processor
        )
