"""The ``qwen-image`` pipeline: prompt → text encoder (vLLM pooling) → MMDiT + VAE (diffusers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core import PipelineConfig
from omni_qwen_image.build import ENCODER_DIR, PROMPT_TEMPLATE, TEMPLATE_PREFIX_TOKENS

if TYPE_CHECKING:
    from omni_core.plugin import PluginHost

PIPELINE = "qwen-image"
MAX_SEQUENCE_LENGTH = 512  # QwenImagePipeline's default max_sequence_length
DEFAULT_GUIDANCE = 4.0  # QwenImagePipeline's true_cfg_scale
SECTION_CFG = "cfg"  # omni-cfg's pipeline section


def encoder_engine_args(
    model: str = "tiny-qwen-image", subfolder: str = ENCODER_DIR
) -> dict[str, Any]:
    """A ``vllm`` pooling stage: the templated prompt's final hidden states, the template's
    prefix left out (what ``QwenImagePipeline.encode_prompt`` returns)."""
    return {
        "model": model,
        "subfolder": subfolder,
        "max_model_len": 1024 + TEMPLATE_PREFIX_TOKENS,
        "pooling": {
            "template": PROMPT_TEMPLATE,
            "drop_prefix": TEMPLATE_PREFIX_TOKENS,
            "max_length": MAX_SEQUENCE_LENGTH,
        },
    }


def cfg_available(host: PluginHost) -> bool:
    """Whether an enabled plugin of ``host`` (the one resolving the pipeline) registers the
    ``cfg:`` pipeline section (omni-cfg, unless disabled): asked of the host this plugin was
    given, neither probed by module name nor looked up in a host built from the environment."""
    return SECTION_CFG in host.config_sections()


def qwen_image_pipeline(
    host: PluginHost, model: str = "tiny-qwen-image", steps: int = 4, size: int = 32
) -> PipelineConfig:
    """Tiny defaults (the tiny model: 32x32, 4 steps). Unguided unless a request asks for
    guidance (``extra["cfg"]``: ``omni run qwen-image --negative-prompt ... [--guidance S]``,
    omni-cfg's flags); with omni-cfg missing or disabled on ``host`` such a request is refused
    (400)."""
    config: dict[str, Any] = {
        "name": PIPELINE,
        "requires_plugins": ["qwen-image"],
        "stages": [
            {
                "id": 0,
                "name": "encoder",
                "kind": "vllm",
                "engine_args": encoder_engine_args(model),
            },
            {
                "id": 1,
                "name": "dit",
                "kind": "diffusers",
                "inputs": [0],
                "bridge": "prompt-embeds",
                "engine_args": {"model": model, "steps": steps, "height": size, "width": size},
                "final_output": True,
                "final_output_type": "image",
            },
        ],
    }
    if cfg_available(host):
        # as QwenImagePipeline: unguided unless the request asks (a negative prompt or a scale in
        # extra["cfg"]), then true CFG at its default true_cfg_scale 4 unless the request says
        config[SECTION_CFG] = {
            "stage": "dit",
            "enabled": False,
            "guidance_scale": DEFAULT_GUIDANCE,
            "negative_prompt": " ",
            "timeout_s": 60,
        }
    return PipelineConfig.from_dict(config, source=f"<pipeline {PIPELINE} (omni-qwen-image)>")


EDIT_PIPELINE = "qwen-image-edit"
EDIT_PLUS_PIPELINE = "qwen-image-edit-plus"
EDIT_SIZE = 32  # the tiny model's condition area: 32x32 (QwenImageEditPipeline: 1024x1024)
PLUS_VL_SIZE = 48  # tiny Edit-Plus's VL image area: 48x48 (QwenImageEditPlusPipeline: 384x384)
PLUS_MAX_IMAGES = 3  # input images per Edit-Plus request (Qwen-Image-Edit-2509: 1 to 3)


def edit_encoder_engine_args(
    model: str = "tiny-qwen-image-edit",
    condition_area: int = EDIT_SIZE * EDIT_SIZE,
    plus: bool = False,
) -> dict[str, Any]:
    """A ``vllm`` pooling stage on the whole Qwen2.5-VL encoder: the edit template (its image
    placeholder expanded by vLLM's processor for the prompt's ``multi_modal_data["image"]``,
    first resized to about ``condition_area`` pixels as ``QwenImageEditPipeline`` resizes its VL
    prompt's image), the 64-token prefix left out (``encode_prompt``'s rows). Its processes get
    the family kit's compat shim (``PYTHONPATH``): the VL processor without torchvision.
    ``plus``: Edit-Plus's template, each input image's ``Picture N: ...`` before the prompt,
    up to :data:`PLUS_MAX_IMAGES` images."""
    from omni_core.family.compat import PORTABLE_PYTHONPATH
    from omni_qwen_image.build_edit import (
        EDIT_ENCODER_DIR,
        EDIT_PLUS_IMAGE_PROMPT,
        EDIT_PLUS_TEMPLATE,
        EDIT_PREFIX_TOKENS,
        EDIT_TEMPLATE,
    )

    pooling: dict[str, Any] = {
        "template": EDIT_PLUS_TEMPLATE if plus else EDIT_TEMPLATE,
        "drop_prefix": EDIT_PREFIX_TOKENS,
        "max_length": MAX_SEQUENCE_LENGTH,
        "image_area": condition_area,
    }
    if plus:
        pooling["image_prompt"] = EDIT_PLUS_IMAGE_PROMPT
    images = PLUS_MAX_IMAGES if plus else 1
    return {
        "model": model,
        "subfolder": EDIT_ENCODER_DIR,
        "max_model_len": 2048,
        "env": {"PYTHONPATH": PORTABLE_PYTHONPATH},
        "engine": {"limit_mm_per_prompt": {"image": images, "video": 0}},
        "pooling": pooling,
    }


def qwen_image_edit_pipeline(
    host: PluginHost,
    model: str = "tiny-qwen-image-edit",
    steps: int = 4,
    size: int = EDIT_SIZE,
    plus: bool = False,
) -> PipelineConfig:
    """Qwen-Image-Edit: ``{"prompt": text, "multi_modal_data": {"image": RGB}}`` → the VL encoder
    (vLLM pooling, image included) → MMDiT + VAE on the input image's latents → PNG, by default
    of the input's condition size (about ``size``² pixels). Guidance as ``qwen-image``'s, the
    negative prompt encoded with the same input image (omni-cfg's ``share_media``). ``plus``:
    Edit-Plus (``tiny-qwen-image-edit-plus``): 1 to 3 input images, the VL encoder sees them at
    about :data:`PLUS_VL_SIZE`² pixels, the VAE at ``size``², the output defaults to the last
    one's size."""
    name = EDIT_PLUS_PIPELINE if plus else EDIT_PIPELINE
    vl_area = PLUS_VL_SIZE * PLUS_VL_SIZE if plus else size * size
    config: dict[str, Any] = {
        "name": name,
        "requires_plugins": ["qwen-image"],
        "stages": [
            {
                "id": 0,
                "name": "encoder",
                "kind": "vllm",
                "engine_args": edit_encoder_engine_args(model, vl_area, plus),
            },
            {
                "id": 1,
                "name": "dit",
                "kind": "diffusers",
                "inputs": [0],
                "bridge": "prompt-embeds",
                "engine_args": {
                    "model": model,
                    "steps": steps,
                    "height": size,
                    "width": size,
                    "condition_area": size * size,
                },
                "final_output": True,
                "final_output_type": "image",
            },
        ],
    }
    if cfg_available(host):
        config[SECTION_CFG] = {
            "stage": "dit",
            "enabled": False,
            "guidance_scale": DEFAULT_GUIDANCE,
            "negative_prompt": " ",
            "timeout_s": 60,
            "share_media": True,
        }
    return PipelineConfig.from_dict(config, source=f"<pipeline {name} (omni-qwen-image)>")
