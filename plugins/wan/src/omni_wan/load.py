"""Loading a ``WanPipeline`` folder's parts (in a stage process, or a test's reference).

``WanTransformer3DModel.from_pretrained`` needs ``accelerate`` (its ``_keep_in_fp32_modules``
forbid ``low_cpu_mem_usage=False``, the default without accelerate). The parts are loaded here
from their configs and safetensors instead, which needs nothing but diffusers and gives the same
float32 weights either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DITS = ("transformer", "transformer_2")


def load_model(cls: Any, folder: Path) -> Any:
    """A diffusers model of class ``cls`` from ``folder`` (config + safetensors), float32, eval."""
    from safetensors.torch import load_file

    model = cls.from_config(cls.load_config(str(folder)))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no safetensors weights")
    state: dict[str, Any] = {}
    for file in files:
        state.update(load_file(str(file)))
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_parts(folder: Path, text: bool) -> dict[str, Any]:
    """The ``WanPipeline`` components of ``folder`` (with its tokenizer and text encoder when
    ``text``, else None there), ready for ``WanPipeline(**parts)``."""
    import json

    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel

    index = json.loads((folder / "model_index.json").read_text())
    parts: dict[str, Any] = {
        "tokenizer": None,
        "text_encoder": None,
        "vae": load_model(AutoencoderKLWan, folder / "vae"),
        "scheduler": UniPCMultistepScheduler.from_pretrained(str(folder / "scheduler")),
        "boundary_ratio": index.get("boundary_ratio"),
    }
    for name in DITS:
        entry = index.get(name)
        present = isinstance(entry, list) and entry[0] is not None
        parts[name] = load_model(WanTransformer3DModel, folder / name) if present else None
    if text:
        parts.update(load_text(folder))
    return parts


def load_text(folder: Path) -> dict[str, Any]:
    """The tokenizer and UMT5 encoder of ``folder``."""
    import torch
    from transformers import AutoTokenizer, UMT5EncoderModel

    return {
        "tokenizer": AutoTokenizer.from_pretrained(str(folder / "tokenizer")),
        "text_encoder": UMT5EncoderModel.from_pretrained(
            str(folder / "text_encoder"), dtype=torch.float32
        ).eval(),
    }


def pipeline(folder: Path, text: bool = True) -> Any:
    """A ``WanPipeline`` of ``folder`` (diffusers' own class, e.g. a test's reference)."""
    from diffusers import WanPipeline

    pipe: Any = WanPipeline(**load_parts(folder, text))
    pipe.set_progress_bar_config(disable=True)
    return pipe
