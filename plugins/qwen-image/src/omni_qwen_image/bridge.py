"""The ``prompt-embeds`` bridge: an upstream pooling stage's states as ``prompt_embeds``."""

from __future__ import annotations

from typing import Any

from omni_core import StageResult


def prompt_embeds_bridge(sources: list[StageResult], original_prompt: Any, params: Any) -> Any:
    """``{"prompt_embeds": float32 [tokens, hidden]}``: the one upstream stage's ``final``
    hidden states (a ``vllm`` stage with ``engine_args.pooling`` emits them in one chunk);
    None before it has any. A request whose prompt carries ``multi_modal_data["image"]`` (an
    edit's input image, which the encoder saw) hands it on as ``"image"`` (uint8 [H, W, 3]; a
    list of several as a list), for the ``diffusers`` stage's VAE."""
    if len(sources) != 1:
        raise ValueError(f"the prompt-embeds bridge takes one upstream stage, got {len(sources)}")
    chunks = sources[0].hidden_states
    if not chunks:
        return None
    arrays = [chunk.layers.get("final") for chunk in chunks]
    if any(a is None for a in arrays):
        raise ValueError(f"stage '{sources[0].stage_name}' emitted no 'final' hidden states")
    import numpy as np

    out: dict[str, Any] = {
        "prompt_embeds": arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    }
    image = input_image(original_prompt)
    if image is not None:
        out["image"] = image
    return out


def input_image(prompt: Any) -> Any:
    """A prompt's ``multi_modal_data["image"]`` as uint8 RGB array(s); None without one."""
    if not isinstance(prompt, dict):
        return None
    media = prompt.get("multi_modal_data")
    image = media.get("image") if isinstance(media, dict) else None
    if image is None:
        return None
    if isinstance(image, list | tuple):
        return [_rgb(im) for im in image]
    return _rgb(image)


def _rgb(image: Any) -> Any:
    import numpy as np

    convert = getattr(image, "convert", None)  # a Pillow image
    return np.asarray(convert("RGB")) if convert is not None else image
