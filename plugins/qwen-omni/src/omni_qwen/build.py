"""Builder of ``tiny-qwen2.5-omni``: the real Qwen2.5-Omni architecture at tiny sizes.

Everything is built locally and deterministically (no hub, fixed seeds, a corpus generated here):
the ``Qwen2_5OmniConfig`` (thinker with audio and vision encoders, talker, token2wav DiT +
BigVGAN), random weights, a byte-level BPE tokenizer with the Qwen2.5-Omni special tokens, the
processor files (Whisper feature extractor, Qwen2-VL image processor, video sizes), the chat
template and ``spk_dict.pt`` (Chelsie, Ethan). Sizes that must agree are checked in
:func:`check_config` (see docs/models.md for why each matters). The recipe's generic parts
(corpus, tokenizer, weights, processor pieces) are the family kit's (:mod:`omni_core.family`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omni_core.family import (
    bpe_tokenizer,
    corpus,
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

SEED = 1234
BPE_VOCAB = 4000  # trained entries; the special tokens follow at 4000.., fillers up to VOCAB
VOCAB = 4096  # thinker vocab == len(tokenizer): every id a random model samples detokenizes
# The Qwen2 vocabulary's added tokens both omni families keep (real ids 151643.. for ChatML).
CHATML_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CODE_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
# Qwen2.5-Omni's added tokens, in the real order (real ids 151643..; here 4000..).
SPECIAL_TOKENS = (
    *CHATML_TOKENS,
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|vision_pad|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
    *CODE_TOKENS,
)
TTS_TOKENS = ("<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>")
SPEAKERS = ("Chelsie", "Ethan")
SPEAKER_TOKENS = tuple(f"<|speaker_{s.lower()}|>" for s in SPEAKERS)


def token_id(token: str) -> int:
    """The id of a special, tts or speaker token in the tiny vocabulary."""
    named = SPECIAL_TOKENS + TTS_TOKENS + SPEAKER_TOKENS
    return BPE_VOCAB + named.index(token)


SYSTEM_PROMPT = (
    "You are a tiny random stand-in for Qwen, a virtual human that hears and sees, "
    "and answers in text and speech."
)


# After Qwen2.5-Omni's template: a default system turn, placeholders between begin/end markers.
CHAT_TEMPLATE = omni_chat_template(
    "<|audio_bos|><|AUDIO|><|audio_eos|>",
    "<|vision_bos|><|IMAGE|><|vision_eos|>",
    "<|vision_bos|><|VIDEO|><|vision_eos|>",
    SYSTEM_PROMPT,
)

# Common English words, the start of both omni families' tokenizer corpora.
ENGLISH_WORDS = (
    "the a an of to and in is it you that he was for on are with as his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up use "
    "your how said each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
).split()
_WORDS = [
    *ENGLISH_WORDS,
    *(
        "sound no most people my over know water than call first who may down side been now find "
        "hello world audio image video voice speech music picture listen hear see speak answer "
        "question tell describe what colour color sound tone sine wave frequency hertz second "
        "assistant user system model tiny random omni qwen thinker talker token wav"
    ).split(),
]


def build_tokenizer() -> Any:
    extra = {
        "audio_token": "<|AUDIO|>",
        "audio_bos_token": "<|audio_bos|>",
        "audio_eos_token": "<|audio_eos|>",
        "image_token": "<|IMAGE|>",
        "video_token": "<|VIDEO|>",
        "vision_bos_token": "<|vision_bos|>",
        "vision_eos_token": "<|vision_eos|>",
    }
    return qwen_tokenizer(_WORDS, 20251203, SPECIAL_TOKENS + TTS_TOKENS + SPEAKER_TOKENS, extra)


def qwen_tokenizer(
    words: list[str], seed: int, added: tuple[str, ...], extra: dict[str, str]
) -> Any:
    """A Qwen omni family's tiny tokenizer: the kit's BPE of :data:`BPE_VOCAB` entries on the
    kit's corpus of ``words`` (``seed``), ``added`` from id :data:`BPE_VOCAB` on, :data:`VOCAB`
    tokens in all (also omni-qwen3's, through :mod:`omni_qwen.api`)."""
    return bpe_tokenizer(corpus(words, seed=seed), added, extra, BPE_VOCAB, VOCAB)


# The thinker's encoders at tiny sizes (both omni families; each adds its own keys).
TINY_AUDIO = {
    "d_model": 32,
    "encoder_layers": 2,
    "encoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "num_mel_bins": 128,
    "output_dim": 128,
}
TINY_VISION = {
    "depth": 2,
    "hidden_size": 64,
    "num_heads": 2,
    "intermediate_size": 128,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 128,
}
# redraw()'s scales of the thinker: greedy output depends on the prompt at these.
THINKER_SCALES = (
    ("thinker.lm_head.", 0.4),
    ("thinker.model.", 0.2),
    ("thinker.audio_tower.", 0.1),
    ("thinker.visual.", 0.1),
)


def build_config(user_token_id: int) -> Any:
    from transformers import Qwen2_5OmniConfig

    ids = {
        "audio_token_index": token_id("<|AUDIO|>"),
        "image_token_index": token_id("<|IMAGE|>"),
        "video_token_index": token_id("<|VIDEO|>"),
        "audio_start_token_id": token_id("<|audio_bos|>"),
        "audio_end_token_id": token_id("<|audio_eos|>"),
    }
    vision_ids = {
        "vision_start_token_id": token_id("<|vision_bos|>"),
        "vision_end_token_id": token_id("<|vision_eos|>"),
    }
    mrope = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]}
    thinker = {
        "text_config": {
            "vocab_size": VOCAB,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,  # head_dim 32: vLLM's CPU attention needs >= 32
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": mrope,
            "tie_word_embeddings": False,
            "bos_token_id": token_id("<|endoftext|>"),
            "eos_token_id": token_id("<|im_end|>"),
            "pad_token_id": token_id("<|endoftext|>"),
        },
        "audio_config": {**TINY_AUDIO, "n_window": 100, "max_source_positions": 1500},
        "vision_config": {
            **TINY_VISION,
            "patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        "user_token_id": user_token_id,
        "tie_word_embeddings": False,
        **ids,
        **vision_ids,
    }
    talker = {
        "vocab_size": 8448,
        "embedding_size": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "max_position_embeddings": 32768,
        "rope_parameters": mrope,
        "tts_text_pad_token_id": token_id("<|tts_pad|>"),
        "tts_text_start_token_id": token_id("<|tts_bos|>"),
        "tts_text_end_token_id": token_id("<|tts_eos|>"),
        **ids,
        **vision_ids,
    }
    token2wav = {
        "dit_config": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "head_dim": 16,
            "emb_dim": 16,
            "enc_emb_dim": 16,
            "enc_dim": 16,
            "enc_channels": [32, 32, 32, 32, 96],
            "enc_attention_channels": 16,
            "enc_se_channels": 16,
            "mel_dim": 80,
            "repeats": 2,
            "num_embeds": 8448,  # >= talker vocab: a random talker may emit any codec id
            "look_ahead_layers": [1],
            "look_backward_layers": [0],
        },
        "bigvgan_config": {
            "mel_dim": 80,
            "upsample_initial_channel": 128,
            "upsample_rates": [5, 3, 2, 2, 2, 2],
        },
    }
    config = Qwen2_5OmniConfig(
        thinker_config=thinker, talker_config=talker, token2wav_config=token2wav
    )
    check_config(config)
    return config


_SHARED_IDS = (  # the talker's get_rope_index runs on thinker token ids
    "audio_token_index",
    "image_token_index",
    "video_token_index",
    "audio_start_token_id",
    "audio_end_token_id",
)


def check_config(config: Any) -> None:
    """The sizes and ids that must agree (each one broke something when it did not)."""
    th, tk, t2w = config.thinker_config, config.talker_config, config.token2wav_config
    text, dit, vgan = th.text_config, t2w.dit_config, t2w.bigvgan_config
    head_dim = text.hidden_size // text.num_attention_heads
    problems = [
        (text.hidden_size == th.audio_config.output_dim, "thinker hidden != audio output_dim"),
        (text.hidden_size == th.vision_config.out_hidden_size, "thinker hidden != vision out"),
        (text.hidden_size == tk.embedding_size, "thinker hidden != talker embedding_size"),
        (sum(text.rope_parameters["mrope_section"]) * 2 == head_dim, "thinker mrope != head/2"),
        (sum(tk.rope_parameters["mrope_section"]) * 2 == tk.head_dim, "talker mrope != head/2"),
        (head_dim in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512), "vLLM CPU head_dim"),
        (dit.enc_channels[-1] == sum(dit.enc_channels[1:-1]), "DiT enc_channels[-1]"),
        (dit.mel_dim == vgan.mel_dim, "DiT mel_dim != BigVGAN mel_dim"),
        (vgan.upsample_initial_channel % 2 ** len(vgan.upsample_rates) == 0, "BigVGAN channels"),
        (dit.num_embeds >= tk.vocab_size, "DiT codec table < talker vocab"),
        (
            all(getattr(tk, k) == getattr(th, k) for k in _SHARED_IDS),
            "talker multimodal ids != thinker's",
        ),
        (
            max(tk.tts_text_start_token_id, tk.tts_text_end_token_id, tk.tts_text_pad_token_id)
            < text.vocab_size,
            "tts text ids outside the thinker vocab",
        ),
    ]
    require_consistent("tiny-qwen2.5-omni", problems)


VOICE_GAIN = 1e6  # token2wav's waveform scale (randomize)


def randomize(model: Any) -> None:
    """Re-draw the matrices from a seeded generator at scales where greedy output depends on the
    prompt (with the default std 0.02 it falls into a short cycle at once)."""
    import torch

    redraw(model, THINKER_SCALES, SEED)
    with torch.no_grad():
        model.talker.codec_head.weight.mul_(10.0)
        # BigVGAN's last layer (conv_post: linear, no bias, then a clamp to [-1, 1]) scaled so the
        # random vocoder is audible: its output peaks at ~4.4e-7 otherwise (~0.44 after)
        model.token2wav.code2wav_bigvgan_model.conv_post.weight.mul_(VOICE_GAIN)


def build_processor(tokenizer: Any) -> Any:
    from transformers import Qwen2_5OmniProcessor

    image = {"min_pixels": 56 * 56, "max_pixels": 64 * 28 * 28, "patch_size": 14, "merge_size": 2}
    video = {"size": {"shortest_edge": 56 * 56, "longest_edge": 64 * 28 * 28}}
    return omni_processor(Qwen2_5OmniProcessor, tokenizer, CHAT_TEMPLATE, image, video)


def speakers() -> dict[str, dict[str, Any]]:
    import torch

    gen = torch.Generator().manual_seed(SEED + 1)
    return {
        name: {
            "bos_token": token_id(tok),
            "cond": torch.randn(1, 16, generator=gen),  # [1, dit enc_emb_dim]
            "ref_mel": torch.randn(1, 64, 80, generator=gen),  # [1, T, mel_dim]
        }
        for name, tok in zip(SPEAKERS, SPEAKER_TOKENS, strict=True)
    }


def build(out: Path) -> None:
    """Write the whole checkpoint into ``out`` (about 20 MB, a few seconds on 2 cores)."""
    install()
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    with quiet_transformers():
        tokenizer = build_tokenizer()
        config = build_config(user_token_id=tokenizer.convert_tokens_to_ids("user"))
        processor = build_processor(tokenizer)
        write_checkpoint(
            out, Qwen2_5OmniForConditionalGeneration, config, SEED, randomize, processor
        )
        torch.save(speakers(), out / "spk_dict.pt")
