"""Builder of ``tiny-qwen-image-edit``: Qwen-Image-Edit's architecture at tiny sizes.

The components are ``tiny-qwen-image``'s (:mod:`omni_qwen_image.build`: the same text encoder,
MMDiT, VAE and scheduler builders and seeds); only the tokenizer differs: trained on both
templates so that Qwen-Image-Edit's prefix (system turn and ``<|im_start|>user\\n``) is exactly
:data:`EDIT_PREFIX_TOKENS` tokens (``QwenImageEditPipeline.prompt_template_encode_start_idx``,
hard-coded) and Qwen-Image's stays 34. A ``Qwen2VLProcessor`` (transformers' PIL image processor
and the family kit's stub video processor: no torchvision) encodes the input image. Saved as a
diffusers ``QwenImageEditPipeline`` folder plus ``text_encoder_vl/``: the whole Qwen2.5-VL text
encoder (vision tower included) with the tokenizer and processor config, which vLLM's pooling
runner loads with the kit's compat shim in its processes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from omni_qwen_image.build import (
    PROMPT_TEMPLATE,
    TEMPLATE_PREFIX_TOKENS,
    build_scheduler,
    build_text_encoder,
    build_tokenizer,
    build_transformer,
    build_vae,
    check_sizes,
)

# QwenImageEditPipeline.prompt_template_encode and its prompt_template_encode_start_idx.
EDIT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter "
    "or modify the image. Generate a new image that meets the user's requirements while "
    "maintaining consistency with the original input where appropriate.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
EDIT_PREFIX_TOKENS = 64
# QwenImageEditPlusPipeline: the same system turn, no placeholder in the template; each input
# image's own text goes before the prompt
EDIT_PLUS_TEMPLATE = EDIT_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "")
EDIT_PLUS_IMAGE_PROMPT = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"
EDIT_ENCODER_DIR = "text_encoder_vl"  # the vLLM-loadable VL encoder, next to the diffusers folders
# the VL image processor's bounds: 56x56 .. 64 merged patches (tiny), as omni-qwen's tiny models
VL_MIN_PIXELS = 56 * 56
VL_MAX_PIXELS = 64 * 28 * 28


def build_edit_tokenizer() -> Any:
    return build_tokenizer(
        (PROMPT_TEMPLATE, EDIT_TEMPLATE),
        (
            (PROMPT_TEMPLATE.split("{}")[0], TEMPLATE_PREFIX_TOKENS),
            (EDIT_TEMPLATE.split("<|vision_start|>")[0], EDIT_PREFIX_TOKENS),
        ),
    )


def build_processor(tokenizer: Any) -> Any:
    """``Qwen2VLProcessor`` without torchvision (the family kit's shim installed first)."""
    from omni_core.family.compat import install, stub_video_processor_class

    install()
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    image = Qwen2VLImageProcessorPil(
        min_pixels=VL_MIN_PIXELS,
        max_pixels=VL_MAX_PIXELS,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    video = stub_video_processor_class()(
        size={"shortest_edge": VL_MIN_PIXELS, "longest_edge": VL_MAX_PIXELS}
    )
    return Qwen2VLProcessor(image_processor=image, video_processor=video, tokenizer=tokenizer)


def build_edit(out: Path, plus: bool = False) -> None:
    """Write the ``QwenImageEditPipeline`` folder (``plus``: ``QwenImageEditPlusPipeline``, the
    same components) and ``text_encoder_vl/`` into ``out``."""
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline
    from diffusers.utils import logging as df_logging
    from transformers.utils import logging as hf_logging

    verbosity, df_verbosity = hf_logging.get_verbosity(), df_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    df_logging.set_verbosity_error()
    try:
        out.mkdir(parents=True, exist_ok=True)
        tokenizer = build_edit_tokenizer()
        text_encoder = build_text_encoder(tokenizer)
        transformer, vae = build_transformer(), build_vae()
        check_sizes(text_encoder, transformer, vae)
        processor = build_processor(tokenizer)
        cls = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
        pipe = cls(
            scheduler=build_scheduler(),
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            processor=processor,
            transformer=transformer,
        )
        pipe.save_pretrained(out, safe_serialization=True)
        export_vl_encoder(out)
    finally:
        hf_logging.set_verbosity(verbosity)
        df_logging.set_verbosity(df_verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def export_vl_encoder(out: Path) -> None:
    """``text_encoder_vl/``: the text encoder's files, the tokenizer's and the processor's (what
    vLLM's Qwen2.5-VL model and its multimodal processor read from one folder)."""
    target = out / EDIT_ENCODER_DIR
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    for folder in ("text_encoder", "tokenizer", "processor"):
        for path in sorted((out / folder).iterdir()):
            if path.is_file() and not (target / path.name).exists():
                shutil.copyfile(path, target / path.name)
