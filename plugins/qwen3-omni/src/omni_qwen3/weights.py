"""Loading one part of a Qwen3-Omni checkpoint (``talker.*``, ``code2wav.*``): the family kit's
:func:`~omni_core.family.load_part` (per-expert MoE tensors fused as transformers does it, the
module loaded strictly), under its former name here."""

from __future__ import annotations

from omni_core.family import fuse_experts, load_part, read_part

__all__ = ["fuse_experts", "load_part", "read_part"]
