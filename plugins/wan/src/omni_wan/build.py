"""Builder of ``tiny-wan2.1`` and ``tiny-wan2.2``: the real Wan architectures at tiny sizes.

Everything is built locally and deterministically (no hub, fixed seeds): a sentencepiece-like
``tokenizers`` Unigram tokenizer (``<pad>`` = 0, ``</s>`` = 1, ``</s>`` appended, as UMT5's), a
``UMT5EncoderModel``, a ``WanTransformer3DModel`` (diffusers' own test configuration; Wan 2.2
adds ``transformer_2`` and ``boundary_ratio`` = 0.875, the A14B two-expert layout), an
``AutoencoderKLWan`` and Wan's ``UniPCMultistepScheduler`` (flow prediction, shift 3), saved as
a diffusers ``WanPipeline`` folder. Sizes that must agree are checked in :func:`check_sizes`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEED = 20261206
TEXT_DIM = 32  # UMT5 d_model == transformer text_dim
Z_DIM = 16  # VAE latent channels == transformer in/out channels (T2V)
BOUNDARY_RATIO = 0.875  # Wan 2.2 A14B: transformer (high noise) above 875 of 1000 timesteps
VERSIONS = ("2.1", "2.2")
VOCAB_SIZE = 96  # the encoder's embedding rows: above every id the tokenizer gives (76)

_PIECES = (
    "a the red green blue cat dog bird fish tree house car boat sun moon sky sea river "
    "city flower cloud rain snow light dark small big running flying walking video of on in"
).split()
_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789.,"


def tokenizer() -> Any:
    """A Unigram tokenizer (sentencepiece-like, as UMT5's): whole words first, then letters, so
    any lowercase text tokenizes; ``<unk>`` for the rest."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [("\u2581" + w, -1.0 - i / 100) for i, w in enumerate(_PIECES)]
    vocab += [(c, -5.0 - i / 100) for i, c in enumerate(_LETTERS)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
    )


def components(version: str) -> dict[str, Any]:
    """The pipeline's components with weights from a seeded generator (registration order)."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    if version not in VERSIONS:
        raise ValueError(f"Wan version {version!r}: one of {', '.join(VERSIONS)}")
    tok = tokenizer()
    torch.manual_seed(SEED)
    encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=VOCAB_SIZE,
            d_model=TEXT_DIM,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            feed_forward_proj="gated-gelu",
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        )
    ).eval()

    def dit() -> Any:
        model: Any = WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=Z_DIM,
            out_channels=Z_DIM,
            text_dim=TEXT_DIM,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        )
        return model.eval()

    transformer = dit()
    vae: Any = AutoencoderKLWan(
        base_dim=3,
        z_dim=Z_DIM,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    )
    vae.eval()
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0
    )
    parts: dict[str, Any] = {
        "tokenizer": tok,
        "text_encoder": encoder,
        "transformer": transformer,
        "vae": vae,
        "scheduler": scheduler,
    }
    if version == "2.2":
        parts["transformer_2"] = dit()
        parts["boundary_ratio"] = BOUNDARY_RATIO
    with torch.no_grad():
        _sharpen(parts)
    check_sizes(parts)
    return parts


CROSS_ATTENTION_GAIN = 8.0
DECODER_GAIN = 4.0


def _sharpen(parts: dict[str, Any]) -> None:
    """Make the tiny model's output depend visibly on its inputs. At default init the DiT barely
    reads the text (two prompts' latents differ by 0.6 %) and the VAE's frames stay within
    0.5 +- 0.07, so a different negative prompt or guidance scale moved frames by at most one
    intensity level: a parity test could not tell them apart. The cross-attention outputs are
    scaled by 8 and the decoder's last convolution by 4 (prompt change: up to 40 levels; negative
    prompt or scale: ~4)."""
    for name in ("transformer", "transformer_2"):
        if name in parts:
            for block in parts[name].blocks:
                block.attn2.to_out[0].weight.mul_(CROSS_ATTENTION_GAIN)
    conv = parts["vae"].decoder.conv_out
    conv.weight.mul_(DECODER_GAIN)
    conv.bias.mul_(DECODER_GAIN)


def check_sizes(parts: dict[str, Any]) -> None:
    """The sizes that must agree (one error naming every disagreement)."""
    text_dim = parts["text_encoder"].config.d_model
    z_dim = parts["vae"].config.z_dim
    errors = []
    tokens = len(parts["tokenizer"])
    if tokens > parts["text_encoder"].config.vocab_size:
        errors.append(f"tokenizer has {tokens} ids, text_encoder.vocab_size is smaller")
    for name in ("transformer", "transformer_2"):
        dit = parts.get(name)
        if dit is None:
            continue
        if dit.config.text_dim != text_dim:
            errors.append(f"{name}.text_dim {dit.config.text_dim} != text_encoder.d_model")
        if not dit.config.in_channels == dit.config.out_channels == z_dim:
            errors.append(f"{name} in/out channels != vae.z_dim {z_dim}")
    if errors:
        raise ValueError("tiny Wan sizes disagree: " + "; ".join(errors))


def build(out: Path, version: str) -> None:
    """Write the ``WanPipeline`` folder of ``version`` to ``out``."""
    from diffusers import WanPipeline
    from diffusers.utils import logging as df_logging

    df_logging.set_verbosity_error()
    pipe: Any = WanPipeline(**components(version))
    out.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(out), safe_serialization=True)
