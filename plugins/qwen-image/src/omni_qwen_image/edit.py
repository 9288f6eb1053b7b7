"""Qwen-Image-Edit in a ``diffusers`` stage's process: the pipeline class of a model folder, and
an input image as ``QwenImageEditPipeline`` prepares it for the VAE (resized to about the
stage's ``condition_area`` pixels, aspect ratio kept, sides multiples of 32: its
``calculate_dimensions``); the admission check of an edit request's input image."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from omni_core import RequestError

EDIT_CLASSES = {"QwenImageEditPipeline": 1, "QwenImageEditPlusPipeline": None}  # most images


def pipeline_class(model: Path) -> tuple[Any, dict[str, Any], int | None]:
    """The diffusers class of a ``QwenImagePipeline``, ``QwenImageEditPipeline`` or
    ``QwenImageEditPlusPipeline`` folder, what ``from_pretrained`` must leave out besides the text
    encoder and tokenizer, and the most input images it edits (0: none; None: any number)."""
    import diffusers

    name = json.loads((model / "model_index.json").read_text()).get("_class_name")
    if name in EDIT_CLASSES:
        return getattr(diffusers, name), {"processor": None}, EDIT_CLASSES[name]
    return diffusers.QwenImagePipeline, {}, 0


def condition_size(width: int, height: int, area: int) -> tuple[int, int]:
    """(height, width) of the resized input: diffusers' ``calculate_dimensions(area, w / h)``."""
    ratio = width / height
    w = math.sqrt(area * ratio)
    h = w / ratio
    return round(h / 32) * 32, round(w / 32) * 32


def as_pil(image: Any) -> Any:
    """A request's input image (uint8 ``[H, W, 3]`` array or a Pillow image) as RGB Pillow."""
    import numpy as np
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    try:
        array = np.asarray(image)
    except Exception as exc:
        raise RequestError(f"image: not an image array ({exc})", param="image") from None
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise RequestError(
            f"image: uint8 [height, width, 3] expected, got {array.dtype} {list(array.shape)}",
            param="image",
        )
    return Image.fromarray(array)


def condition_images(engine: Any, images: list[Any] | None) -> tuple[list[Any], list[Any]]:
    """The input images as the edit pipeline's VAE inputs ``[1, 3, 1, h, w]`` in [-1, 1] and
    their (h, w); RequestError (400) naming ``image`` when the stage cannot edit them (a
    text-to-image model, none, more than its pipeline takes) or a size is out of bounds."""
    if engine.max_images is not None and images is not None and len(images) > engine.max_images:
        raise RequestError(
            f"image: {len(images)} input images; stage '{engine.stage}' edits "
            f"{engine.max_images} (Qwen-Image-Edit; several: an Edit-Plus model)",
            param="image",
        )
    if not images:
        images = [None]
    pairs = [condition_image(engine, image) for image in images]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def condition_image(engine: Any, image: Any) -> tuple[Any, tuple[int, int]]:
    """One input image as the edit pipeline's VAE input and its (h, w)."""
    args, pipe = engine.args, engine.pipe
    if engine.max_images == 0:
        raise RequestError(
            f"image: stage '{engine.stage}' loads a text-to-image pipeline, which takes no input "
            "image (an edit pipeline's model is a QwenImageEditPipeline folder)",
            param="image",
        )
    if image is None:
        raise RequestError(
            f"image: stage '{engine.stage}' edits an input image; the prompt carries none "
            "(multi_modal_data['image'] of the encoder's prompt)",
            param="image",
        )
    pil = as_pil(image)
    height, width = condition_size(pil.width, pil.height, args.condition_area)
    if min(height, width) < 32 or max(height, width) > args.max_side:
        raise RequestError(
            f"image: a {pil.width}x{pil.height} input resizes to {width}x{height} at "
            f"condition_area={args.condition_area}; each side must be 32..{args.max_side} "
            "(its aspect ratio is too extreme)",
            param="image",
        )
    resized = pipe.image_processor.resize(pil, height, width)
    tensor = pipe.image_processor.preprocess(resized, height, width).unsqueeze(2)
    return tensor.to(engine.device, engine.dtype), (height, width)


def check_input_image(prompt: Any, stage: str, most: int = 1) -> None:
    """An edit request's prompt carries one input image (at most ``most``: an Edit-Plus
    encoder's): ``{"prompt": text, "multi_modal_data": {"image": <RGB Pillow image or uint8
    [H, W, 3]>}}`` (or a list); else one RequestError naming ``multi_modal_data['image']``."""
    where = "multi_modal_data['image']"
    media = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
    image = media.get("image") if isinstance(media, dict) else None
    images = list(image) if isinstance(image, list | tuple) else [image]
    if len(images) > most:
        raise RequestError(
            f"{where}: {len(images)} input images; stage '{stage}' encodes at most {most} "
            "(several: an Edit-Plus pipeline)",
            param=where,
        )
    if image is None or not images:
        raise RequestError(
            f"{where}: stage '{stage}' edits an input image; the prompt carries none "
            "(send {'prompt': text, 'multi_modal_data': {'image': ...}})",
            param=where,
        )
    for i, item in enumerate(images):
        try:
            as_pil(item)
        except RequestError as exc:
            at = where if len(images) == 1 else f"{where}[{i}]"
            raise RequestError(f"{at}: {exc}".replace(": image:", ":"), param=at) from None
