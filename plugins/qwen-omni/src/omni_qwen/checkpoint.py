"""What the talker reads from a Qwen2.5-Omni checkpoint besides its own module: the family kit's
checkpoint readers (:mod:`omni_core.family.checkpoint`), under their former names here."""

from __future__ import annotations

from omni_core.family import (
    ImageGrid,
    generation_config,
    local_checkpoint,
    read_rows,
    token_ids,
)

__all__ = ["ImageGrid", "generation_config", "local_checkpoint", "read_rows", "token_ids"]
