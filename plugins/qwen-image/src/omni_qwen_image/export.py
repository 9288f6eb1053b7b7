"""Qwen-Image's text encoder as a plain ``Qwen2ForCausalLM`` that vLLM loads without torchvision.

vLLM's Qwen2.5-VL model imports a transformers module that needs torchvision (there is no CPU
build of it), and text-to-image needs only the language model: for text, mRoPE with equal
t/h/w positions is ordinary 1-D RoPE, so the Qwen2 export of the LM gives the same last hidden
states (within float rounding). The checkpoint's tensors are renamed shard by shard (``model.*``
and ``lm_head.*`` kept, ``model.language_model.*`` → ``model.*``, ``visual.*`` dropped) without
instantiating the model, so this also works for the real 7B encoder::

    python -m omni_qwen_image.export <Qwen-Image>/text_encoder <Qwen-Image>/tokenizer OUT
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

_TEXT_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "rms_norm_eps",
    "hidden_act",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


def _rename(name: str) -> str | None:
    if name.startswith("model.language_model."):
        return "model." + name[len("model.language_model.") :]
    if name.startswith("visual.") or name.startswith("model.visual."):
        return None
    if name.startswith("model.") or name.startswith("lm_head."):
        return name
    return None


def qwen2_config(vl_config: dict[str, Any], tied: bool) -> Any:
    from transformers import Qwen2Config

    # older checkpoints keep the LM's fields at the top level, newer ones in text_config
    text = {**vl_config, **(vl_config.get("text_config") or {})}
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    theta = rope.get("rope_theta", text.get("rope_theta", 1e6))
    kwargs = {k: text[k] for k in _TEXT_KEYS if text.get(k) is not None}
    return Qwen2Config(
        **kwargs,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        tie_word_embeddings=tied,
        architectures=["Qwen2ForCausalLM"],
        torch_dtype=vl_config.get("torch_dtype") or text.get("torch_dtype") or "float32",
    )


def export_language_model(text_encoder: Path, tokenizer: Path, out: Path) -> None:
    """Write ``out``: ``config.json``, the renamed safetensors (same sharding) and the tokenizer
    files."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    shards = sorted(p for p in text_encoder.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors in {text_encoder}")
    weight_map: dict[str, str] = {}
    for shard in shards:
        tensors = {}
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                new = _rename(name)
                if new is not None:
                    tensors[new] = f.get_tensor(name)
        save_file(dict(sorted(tensors.items())), str(out / shard.name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, shard.name))
    if len(shards) > 1:
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = json.loads((text_encoder / "config.json").read_text())
    qwen2_config(config, tied="lm_head.weight" not in weight_map).save_pretrained(out)
    for path in sorted(tokenizer.iterdir()):
        if path.is_file():
            shutil.copyfile(path, out / path.name)


if __name__ == "__main__":  # pragma: no cover - the real-weights recipe (docs/models.md)
    if len(sys.argv) != 4:
        sys.exit("usage: python -m omni_qwen_image.export TEXT_ENCODER_DIR TOKENIZER_DIR OUT")
    export_language_model(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
