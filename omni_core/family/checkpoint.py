"""What a family's torch stages read from a checkpoint besides their own module: a local copy of
a hub checkpoint, rows of named tensors of (possibly sharded) safetensors files, the generation
config, token id sets, and each image's grid as a Qwen2-VL-style image processor sizes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_core.errors import ConfigError, RequestError


def local_checkpoint(model: str) -> Path:
    """A checkpoint directory: ``model`` itself, or a hub id fetched into the hub cache (its
    configs, safetensors and speakers)."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "spk_dict.pt"]))


def read_rows(checkpoint: Path, name: str, rows: list[int]) -> dict[int, Any]:
    """Rows of one tensor of a (possibly sharded) safetensors checkpoint, reading only those
    rows from the file that holds it (not the whole table: 1 GB for a 7B thinker's embeddings)."""
    from safetensors import safe_open

    file = "model.safetensors"
    index = checkpoint / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        if name not in weight_map:
            raise ConfigError([f"{checkpoint}: no tensor '{name}'"])
        file = weight_map[name]
    with safe_open(str(checkpoint / file), "pt") as f:
        if name not in f.keys():
            raise ConfigError([f"{checkpoint / file}: no tensor '{name}'"])
        table = f.get_slice(name)
        return {row: table[row : row + 1][0] for row in rows}


class ImageGrid:
    """Each image's grid ``(t, h, w)`` in patches, as the checkpoint's image processor sizes it
    (``smart_resize`` to multiples of patch * merge within its pixel bounds)."""

    def __init__(self, checkpoint: Path) -> None:
        config: dict[str, Any] = {}
        for name in ("processor_config.json", "preprocessor_config.json"):
            path = checkpoint / name
            if path.exists():
                data = json.loads(path.read_text())
                config = data.get("image_processor", data)
                break
        size = config.get("size") or {}
        self.patch = int(config.get("patch_size", 14))
        self.merge = int(config.get("merge_size", 2))
        self.min_pixels = int(config.get("min_pixels") or size.get("shortest_edge") or 56 * 56)
        self.max_pixels = int(
            config.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280
        )

    def grids(self, sizes: list[tuple[int, int]], prompt_ids: list[int], image_token: int) -> Any:
        """The grids of a prompt's images (None without images); a count of image tokens that
        the sizes do not explain is a 400."""
        import torch
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        runs = _runs(prompt_ids, image_token)
        if not runs and not sizes:
            return None
        if len(runs) != len(sizes):
            raise RequestError(
                f"the prompt has {len(runs)} image(s) but {len(sizes)} image size(s) reached the "
                "talker (images must be in the prompt's multi_modal_data)"
            )
        grids = []
        for (height, width), tokens in zip(sizes, runs, strict=True):
            factor = self.patch * self.merge
            h, w = smart_resize(height, width, factor, self.min_pixels, self.max_pixels)
            grid = (1, h // self.patch, w // self.patch)
            if grid[1] * grid[2] // self.merge**2 != tokens:
                raise RequestError(
                    f"an image of {height}x{width} makes {grid[1] * grid[2] // self.merge**2} "
                    f"tokens here, but the prompt has {tokens}"
                )
            grids.append(grid)
        return torch.tensor(grids, dtype=torch.long)


def _runs(ids: list[int], token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids``."""
    runs, count = [], 0
    for t in [*ids, None]:
        if t == token:
            count += 1
        elif count:
            runs.append(count)
            count = 0
    return runs


def generation_config(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's ``generation_config.json`` (empty without one)."""
    path = checkpoint / "generation_config.json"
    return json.loads(path.read_text()) if path.exists() else {}


def token_ids(value: Any) -> frozenset[int]:
    """A config's token id entry (None, one id or a list of ids) as a set."""
    if value is None:
        return frozenset()
    if isinstance(value, int):
        return frozenset({value})
    return frozenset(int(v) for v in value)
