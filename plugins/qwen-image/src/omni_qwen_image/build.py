"""Builder of ``tiny-qwen-image``: the real Qwen-Image architectures at tiny sizes.

Everything is built locally and deterministically (no hub, fixed seeds, a corpus generated here):
a byte-level BPE tokenizer with Qwen2.5's special tokens on which Qwen-Image's prompt template
prefix is exactly :data:`TEMPLATE_PREFIX_TOKENS` tokens, a ``Qwen2_5_VLForConditionalGeneration``
text encoder, a ``QwenImageTransformer2DModel``, an ``AutoencoderKLQwenImage`` and Qwen-Image's
``FlowMatchEulerDiscreteScheduler`` settings, saved as a diffusers ``QwenImagePipeline`` folder,
plus ``text_encoder_qwen2/``: the encoder's language model exported as a plain
``Qwen2ForCausalLM`` with the tokenizer, which vLLM loads on CPU (its Qwen2.5-VL class needs
torchvision). Sizes that must agree are checked in :func:`check_sizes`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SEED = 20261203
ENCODER_DIR = "text_encoder_qwen2"  # the vLLM-loadable export, next to the diffusers folders
# QwenImagePipeline.prompt_template_encode and its prompt_template_encode_start_idx.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
TEMPLATE_PREFIX_TOKENS = 34
# Qwen2.5's added tokens in their real order (real ids 151643..; here they follow the BPE vocab).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
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
)
HIDDEN = 64  # text hidden size == transformer joint_attention_dim
Z_DIM = 4  # VAE latent channels; transformer in_channels = 4 * Z_DIM (2x2 packing)
VAE_SCALE = 8  # 2 ** len(temperal_downsample)

_WORDS = (
    "a an the red green blue yellow black white orange purple pink brown grey gray square circle "
    "triangle star cat dog bird fish tree house car boat sun moon sky sea river mountain city "
    "street flower garden forest field cloud rain snow light dark bright small big large tiny "
    "round sharp soft blurry clear painting photo drawing sketch portrait landscape close up of "
    "on in at with and under over next to behind front left right top bottom center low quality "
    "high detailed simple abstract wooden metal glass stone paper old new happy sad two three "
    "four many few text sign reads hello world omni core image model"
).split()


def corpus(templates: tuple[str, ...] = (PROMPT_TEMPLATE,)) -> list[str]:
    """Prompt templates (special tokens taken out; taken in turn) around prompts drawn with an
    LCG (no global RNG): BPE learns every template word as one token."""
    bare = []
    for template in templates:
        for token in SPECIAL_TOKENS:
            template = template.replace(token, "")
        bare.append(template)
    x = 1234567
    lines = []
    for i in range(4000):
        words = []
        for _ in range(2 + i % 9):
            x = (1103515245 * x + 12345) % (2**31)
            words.append(_WORDS[(x >> 4) % len(_WORDS)])
        prompt = " ".join(words) + (", " + str(i % 100) if i % 7 == 0 else "")
        lines.append(bare[i % len(bare)].format(prompt))
    lines.append("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,;:!?'\"()-")
    return lines


def build_tokenizer(
    templates: tuple[str, ...] = (PROMPT_TEMPLATE,),
    prefixes: tuple[tuple[str, int], ...] = (
        (PROMPT_TEMPLATE.split("{}")[0], TEMPLATE_PREFIX_TOKENS),
    ),
) -> Any:
    """The BPE tokenizer trained on ``templates``; each of ``prefixes`` (text, tokens) must
    tokenize to exactly that many tokens (the pipelines hard-code where the prompt starts)."""
    from transformers import Qwen2TokenizerFast

    from omni_core.extend import train_qwen2_bpe

    tok = train_qwen2_bpe(corpus(templates), 768)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    for prefix, tokens in prefixes:
        n = len(tokenizer(prefix).input_ids)
        if n != tokens:
            raise RuntimeError(f"a template prefix is {n} tokens, not {tokens}: {prefix!r}")
    return tokenizer


def vocab_size(tokenizer: Any) -> int:
    return (len(tokenizer) + 63) // 64 * 64


def build_text_encoder(tokenizer: Any) -> Any:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab_size(tokenizer),
            "hidden_size": HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,  # head_dim 32: one vLLM's CPU attention supports
            "num_key_value_heads": 1,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": [4, 6, 6],
            },
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "out_hidden_size": HIDDEN,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(SEED)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32).eval()
    randomize(model, SEED + 1, 0.2)
    return model


def build_transformer() -> Any:
    import torch
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(SEED + 2)
    model = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=4 * Z_DIM,
        out_channels=Z_DIM,
        num_layers=2,
        attention_head_dim=32,
        num_attention_heads=2,
        joint_attention_dim=HIDDEN,
        axes_dims_rope=(8, 12, 12),
    ).eval()
    # diffusers zero-initialises nothing we rely on, but its default std leaves the text path
    # weak: redraw every matrix so the image depends on the prompt (guidance shows).
    randomize(model, SEED + 3, 0.2)
    return model


def build_vae() -> Any:
    import torch
    from diffusers import AutoencoderKLQwenImage

    torch.manual_seed(SEED + 4)
    return AutoencoderKLQwenImage(
        base_dim=16,
        z_dim=Z_DIM,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * Z_DIM,
        latents_std=[1.0] * Z_DIM,
    ).eval()


def build_scheduler() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(  # Qwen/Qwen-Image's scheduler_config.json values
        num_train_timesteps=1000,
        shift=1.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=0.9,
        base_image_seq_len=256,
        max_image_seq_len=8192,
        shift_terminal=0.02,
        time_shift_type="exponential",
    )


def randomize(model: Any, seed: int, std: float) -> None:
    """Redraw every matrix of ``model`` (registration order) from a seeded generator."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def check_sizes(text_encoder: Any, transformer: Any, vae: Any) -> None:
    """Sizes that must agree (each mismatch only fails at call time, with a shape error)."""
    text, tr, va = text_encoder.config.text_config, transformer.config, vae.config
    bad = []
    if tr.joint_attention_dim != text.hidden_size:
        bad.append("transformer joint_attention_dim != text hidden_size")
    if tr.in_channels != 4 * va.z_dim or tr.out_channels != va.z_dim:
        bad.append("transformer in/out channels != 4 * / 1 * vae z_dim")
    if tr.patch_size != 2:
        bad.append("patch_size != 2 (the pipeline packs 2x2)")
    if sum(tr.axes_dims_rope) != tr.attention_head_dim or any(d % 2 for d in tr.axes_dims_rope):
        bad.append("axes_dims_rope must be even and sum to attention_head_dim")
    if not len(va.latents_mean) == len(va.latents_std) == va.z_dim:
        bad.append("vae latents_mean/std lengths != z_dim")
    if 2 ** len(va.temperal_downsample) != VAE_SCALE:
        bad.append(f"vae scale factor != {VAE_SCALE}")
    if bad:
        raise ValueError(f"tiny-qwen-image sizes inconsistent: {'; '.join(bad)}")


def build(out: Path) -> None:
    """Write the pipeline folder and the vLLM export into ``out`` (~13 MB, a few seconds)."""
    from diffusers import QwenImagePipeline
    from diffusers.utils import logging as df_logging
    from transformers.utils import logging as hf_logging

    from omni_qwen_image.export import export_language_model

    verbosity, df_verbosity = hf_logging.get_verbosity(), df_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    df_logging.set_verbosity_error()
    try:
        out.mkdir(parents=True, exist_ok=True)
        tokenizer = build_tokenizer()
        text_encoder = build_text_encoder(tokenizer)
        transformer, vae = build_transformer(), build_vae()
        check_sizes(text_encoder, transformer, vae)
        pipe = QwenImagePipeline(
            scheduler=build_scheduler(),
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            transformer=transformer,
        )
        pipe.save_pretrained(out, safe_serialization=True)
        export_language_model(out / "text_encoder", out / "tokenizer", out / ENCODER_DIR)
    finally:
        hf_logging.set_verbosity(verbosity)
        df_logging.set_verbosity(df_verbosity)
        if bars:
            hf_logging.enable_progress_bar()
