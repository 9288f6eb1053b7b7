"""The hook implementations omni-core loads (entry point ``qwen-image`` -> this module).

Cheap to import (a plugin manager imports it whenever one is built): the builder, diffusers,
transformers and vLLM are imported only when a model is built or a stage starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from omni_core.extend import packaged_checksums
from omni_core.plugin import Bridge, ModelSpec, PipelineSpec, StageKind, hookimpl

if TYPE_CHECKING:
    from pathlib import Path

    from omni_core import PipelineConfig, SamplingParams
    from omni_core.plugin import Admission, OrchestratorPort, PluginHost, RequestView

OMNI_PLUGIN_API_VERSION = 3

TINY_MODEL = "tiny-qwen-image"
TINY_VERSION = "v1"  # bump whenever the builder's output changes (a new cache directory)
IMAGE_PLACEHOLDER = "<|image_pad|>"  # an encoder template with it: the prompt needs one image
TINY_EDIT_MODEL = "tiny-qwen-image-edit"
TINY_EDIT_VERSION = "v1"
EDIT_CHECKSUMS = "checksums_edit.json"
TINY_EDIT_PLUS_MODEL = "tiny-qwen-image-edit-plus"
EDIT_PLUS_CHECKSUMS = "checksums_edit_plus.json"


def committed_checksums() -> dict[str, str]:
    """SHA-256 of every file of the tiny checkpoint, as built here (``checksums.json``)."""
    return packaged_checksums("omni_qwen_image")


def _build_tiny_edit(out: Path) -> None:
    from omni_qwen_image.kind import require_diffusers

    require_diffusers(f"model '{TINY_EDIT_MODEL}'")
    from omni_qwen_image.build_edit import build_edit

    build_edit(out)


def _build_tiny_edit_plus(out: Path) -> None:
    from omni_qwen_image.kind import require_diffusers

    require_diffusers(f"model '{TINY_EDIT_PLUS_MODEL}'")
    from omni_qwen_image.build_edit import build_edit

    build_edit(out, plus=True)


def _build_tiny(out: Path) -> None:
    from omni_qwen_image.kind import require_diffusers

    require_diffusers(f"model '{TINY_MODEL}'")
    from omni_qwen_image.build import build

    build(out)


@hookimpl
def omni_register_models() -> Iterable[ModelSpec]:
    return [
        ModelSpec(
            TINY_MODEL,
            _build_tiny,
            TINY_VERSION,
            committed_checksums(),
            "Qwen-Image architecture at tiny sizes (Qwen2.5-VL text encoder + its Qwen2 export "
            "for vLLM, MMDiT, VAE, scheduler), random weights from a fixed seed, ~13 MB",
        ),
        ModelSpec(
            TINY_EDIT_MODEL,
            _build_tiny_edit,
            TINY_EDIT_VERSION,
            packaged_checksums("omni_qwen_image", EDIT_CHECKSUMS),
            "Qwen-Image-Edit architecture at tiny sizes (tiny-qwen-image's components, a "
            "tokenizer with Edit's 64-token prefix, a Qwen2VLProcessor, the whole VL encoder "
            "for vLLM), random weights from a fixed seed, ~14 MB",
        ),
        ModelSpec(
            TINY_EDIT_PLUS_MODEL,
            _build_tiny_edit_plus,
            TINY_EDIT_VERSION,
            packaged_checksums("omni_qwen_image", EDIT_PLUS_CHECKSUMS),
            "Qwen-Image-Edit-Plus (several input images) at tiny sizes: tiny-qwen-image-edit's "
            "components as a QwenImageEditPlusPipeline folder, ~14 MB",
        ),
    ]


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_qwen_image.kind import DiffusersArgs, make_diffusers_client

    return [
        StageKind(
            "diffusers",
            make_diffusers_client,
            DiffusersArgs,
            "Qwen-Image's MMDiT + scheduler + VAE (diffusers) on prompt embeddings, one "
            "denoising step per engine step, true CFG from weighted conditionings",
            output_mode="whole",
            accepts=("conditionings",),  # what omni-cfg guides (it asks this, not the name)
        )
    ]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_qwen_image.bridge import prompt_embeds_bridge

    return [
        Bridge(
            "prompt-embeds",
            prompt_embeds_bridge,
            "an upstream pooling stage's final hidden states as {'prompt_embeds': array}",
        )
    ]


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    def load(host: PluginHost) -> PipelineConfig:
        from omni_qwen_image.pipelines import qwen_image_pipeline

        return qwen_image_pipeline(host)

    def load_edit(host: PluginHost) -> PipelineConfig:
        from omni_qwen_image.pipelines import qwen_image_edit_pipeline

        return qwen_image_edit_pipeline(host)

    def load_edit_plus(host: PluginHost) -> PipelineConfig:
        from omni_qwen_image.pipelines import qwen_image_edit_pipeline

        return qwen_image_edit_pipeline(host, TINY_EDIT_PLUS_MODEL, plus=True)

    return [
        PipelineSpec(
            "qwen-image",
            load,
            "Qwen-Image (tiny-qwen-image): text encoder on vLLM pooling -> MMDiT + VAE "
            "(diffusers), a PNG; guidance through omni-cfg",
        ),
        PipelineSpec(
            "qwen-image-edit",
            load_edit,
            "Qwen-Image-Edit (tiny-qwen-image-edit): prompt + input image -> VL encoder on vLLM "
            "pooling -> MMDiT + VAE (diffusers), a PNG; guidance through omni-cfg",
        ),
        PipelineSpec(
            "qwen-image-edit-plus",
            load_edit_plus,
            "Qwen-Image-Edit-Plus (tiny-qwen-image-edit-plus): prompt + 1 to 3 input images -> "
            "VL encoder on vLLM pooling -> MMDiT + VAE (diffusers), a PNG; guidance through "
            "omni-cfg",
        ),
    ]


@hookimpl
def omni_admit_request(
    request: RequestView, params: dict[int, SamplingParams], port: OrchestratorPort
) -> Admission | None:
    """Refuse, before anything is allocated, a request whose options a ``diffusers`` stage it
    needs would refuse: a bad field, or an image past the stage's ``max_side``/``max_pixels``
    (one 400 naming the field and the limit; the replica checks again); and, for an edit
    pipeline (a pooling encoder whose template or image_prompt holds an image placeholder), a
    prompt without
    one RGB input image (an Edit-Plus encoder: up to its ``limit_mm_per_prompt``)."""
    from omni_core import RequestError, RequestRejected
    from omni_qwen_image.kind import DiffusersArgs, checked_options

    for sid in sorted(request.needed):
        stage = port.pipeline.stages[sid]
        pooling = getattr(stage.args, "pooling", None) if stage.kind.name == "vllm" else None
        texts = (pooling.template or "") + (pooling.image_prompt or "") if pooling else ""
        if IMAGE_PLACEHOLDER in texts:
            from omni_qwen_image.edit import check_input_image

            limits = stage.args.engine.get("limit_mm_per_prompt") or {}
            try:
                check_input_image(request.prompt, stage.name, int(limits.get("image", 1)))
            except RequestError as exc:
                raise RequestRejected(400, str(exc)) from None
        if stage.kind.name != "diffusers" or not isinstance(stage.args, DiffusersArgs):
            continue
        try:
            checked_options(params[sid].extra, stage.args, stage.name)
        except RequestError as exc:
            raise RequestRejected(400, str(exc)) from None
    return None
