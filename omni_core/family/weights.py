"""Loading one part of a checkpoint (Qwen3-Omni's ``talker.*``, ``code2wav.*``, ...) into its
transformers module, reading only the safetensors files that hold it: what a family's torch
stage loads when it runs one sub-model of a larger checkpoint.

transformers 5.19 fuses MoE experts (``experts.gate_up_proj [E, 2I, H]``, ``experts.down_proj
[E, H, I]``) when it loads a whole model, but not when a part is loaded with ``from_pretrained``
and a sub-config: the experts stay random (NaN logits). The per-expert tensors of the checkpoint
(``experts.<e>.{gate,up,down}_proj.weight``) are fused here the way transformers' own conversion
does it, and the module is loaded strictly (a missing or unexpected tensor is an error naming it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from omni_core.errors import ConfigError

__all__ = ["fuse_experts", "load_part", "read_part"]

_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def read_part(checkpoint: Path, prefix: str) -> dict[str, Any]:
    """Every tensor named ``prefix...`` of the checkpoint, the prefix stripped."""
    from safetensors import safe_open

    index = checkpoint / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({f for name, f in weight_map.items() if name.startswith(prefix)})
    else:
        files = ["model.safetensors"]
    tensors: dict[str, Any] = {}
    for file in files:
        with safe_open(str(checkpoint / file), "pt") as f:
            for name in f.keys():
                if name.startswith(prefix):
                    tensors[name[len(prefix) :]] = f.get_tensor(name)
    if not tensors:
        raise ConfigError(
            [f"{checkpoint}: no '{prefix}*' tensors (is it a checkpoint of this model family?)"]
        )
    return tensors


def fuse_experts(tensors: dict[str, Any]) -> dict[str, Any]:
    """Per-expert MoE weights as transformers' fused ``gate_up_proj`` / ``down_proj``."""
    import torch

    out: dict[str, Any] = {}
    experts: dict[str, dict[int, dict[str, Any]]] = {}
    for name, tensor in tensors.items():
        match = _EXPERT.match(name)
        if match is None:
            out[name] = tensor
        else:
            base, e, proj = match.groups()
            experts.setdefault(base, {}).setdefault(int(e), {})[proj] = tensor
    for base, by_expert in experts.items():
        order = [by_expert[e] for e in sorted(by_expert)]
        out[f"{base}.gate_up_proj"] = torch.stack(
            [torch.cat([w["gate_proj"], w["up_proj"]]) for w in order]
        )
        out[f"{base}.down_proj"] = torch.stack([w["down_proj"] for w in order])
    return out


def load_part(module: Any, checkpoint: Path, prefix: str) -> Any:
    """``module`` (float32, eval) with the checkpoint's ``prefix*`` weights, strictly."""
    state = fuse_experts(read_part(checkpoint, prefix))
    result = module.load_state_dict(state, strict=False)
    # tied weights are not stored twice: accept only those missing
    tied = set(getattr(module, "all_tied_weights_keys", {}) or {})
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise ConfigError(
            [
                f"{checkpoint}: '{prefix}*' does not fit {type(module).__name__}: missing "
                f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}"
            ]
        )
    return module.float().eval()
