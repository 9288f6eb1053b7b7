"""The runtime shim that makes the official ``qwen-tts`` 0.1.1 package run on this stack's
transformers 5.19 and CPU torch, without editing the package (docs/models.md, Qwen3-TTS):

1. ``import qwen_tts`` imports the 25 Hz V1 tokenizer, which imports ``torchaudio`` (PyPI's is a
   CUDA build, not installed here): stub modules with a ``__spec__`` (transformers' ``find_spec``
   raises on a module without one); ``kaldi.fbank`` raises (only V1 uses it);
2. ``check_model_inputs()`` was a decorator factory in 4.57, 5.19 takes ``func``: accept both;
3. ``ROPE_INIT_FUNCTIONS["default"]`` is gone in 5.x: the plain inverse frequencies;
4. ``create_causal_mask(input_embeds=..., cache_position=...)``: 5.19 takes ``inputs_embeds``
   and no ``cache_position`` (wrapped before ``qwen_tts`` imports them by name);
5. list-style ``_tied_weights_keys`` break ``save_pretrained``: ``{}`` (nothing is tied);
6. the remote-code rotary modules' non-persistent ``inv_freq`` comes back from
   ``from_pretrained`` as uninitialised memory (random NaN logits): :func:`restore_rope`
   recomputes it for every module with a ``rope_init_fn``.

:func:`install` runs 1-4 before ``qwen_tts`` is imported; :func:`import_qwen_tts` installs, imports
and applies 5; :func:`load_reference` loads the official wrapper and applies 6. transformers 5.20
will break ``import qwen_tts`` again (its config module imports ``layer_type_validation``).
"""

from __future__ import annotations

import functools
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["import_qwen_tts", "install", "load_reference", "restore_rope"]

_installed = False


def _stub(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    return module


def _fbank(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        "torchaudio is not installed: the 25 Hz (V1) Qwen3-TTS tokenizer is not supported"
    )


def _default_rope(config: Any, device: Any = None, seq_len: Any = None) -> tuple[Any, float]:
    import torch

    params = getattr(config, "rope_parameters", None) or {}
    base = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
    return 1.0 / (base**exponent), 1.0


def install() -> None:
    """Fixes 1-4 (idempotent); must run before ``qwen_tts`` is first imported."""
    global _installed
    if _installed:
        return
    if "torchaudio" not in sys.modules:
        root, compliance, kaldi = (
            _stub("torchaudio"),
            _stub("torchaudio.compliance"),
            _stub("torchaudio.compliance.kaldi"),
        )
        kaldi.fbank = _fbank  # type: ignore[attr-defined]
        compliance.kaldi = kaldi  # type: ignore[attr-defined]
        root.compliance = compliance  # type: ignore[attr-defined]
        sys.modules.update(
            {
                "torchaudio": root,
                "torchaudio.compliance": compliance,
                "torchaudio.compliance.kaldi": kaldi,
            }
        )
    import transformers.masking_utils as masking
    import transformers.utils.generic as generic
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    merge = generic.merge_with_config_defaults

    def check_model_inputs(func: Any = None, **_: Any) -> Any:
        return merge(func) if callable(func) else merge

    generic.check_model_inputs = check_model_inputs
    ROPE_INIT_FUNCTIONS.setdefault("default", _default_rope)
    for name in ("create_causal_mask", "create_sliding_window_causal_mask"):
        setattr(masking, name, _mask_wrapper(getattr(masking, name)))
    _installed = True


def _mask_wrapper(function: Any) -> Any:
    @functools.wraps(function)
    def mask(*args: Any, **kwargs: Any) -> Any:
        if "input_embeds" in kwargs:
            kwargs["inputs_embeds"] = kwargs.pop("input_embeds")
        kwargs.pop("cache_position", None)
        return function(*args, **kwargs)

    return mask


def import_qwen_tts() -> Any:
    """``qwen_tts``, imported with fixes 1-5 (imports librosa, hence numba: never in a process
    running an in-process vLLM engine)."""
    install()
    import qwen_tts
    from qwen_tts.core.models import modeling_qwen3_tts as modeling

    for value in vars(modeling).values():
        if isinstance(value, type) and isinstance(getattr(value, "_tied_weights_keys", None), list):
            setattr(value, "_tied_weights_keys", {})  # noqa: B010
    return qwen_tts


def restore_rope(model: Any) -> int:
    """Recompute ``inv_freq`` of every rotary module under ``model`` (fix 6); returns how many."""
    import torch

    count = 0
    with torch.no_grad():
        for module in model.modules():
            init = getattr(module, "rope_init_fn", None)
            if init is None or not hasattr(module, "inv_freq"):
                continue
            inv_freq, scaling = init(module.config, module.inv_freq.device)
            module.inv_freq = inv_freq.to(module.inv_freq.dtype)
            module.original_inv_freq = module.inv_freq
            module.attention_scaling = scaling
            count += 1
    return count


def load_reference(path: str) -> Any:
    """The official ``Qwen3TTSModel`` wrapper loaded from ``path`` (float32, CPU), fixed."""
    import torch

    qwen_tts = import_qwen_tts()
    wrapper = qwen_tts.Qwen3TTSModel.from_pretrained(path, dtype=torch.float32)
    restore_rope(wrapper.model)
    # the speech tokenizer is held by a plain object, not a submodule: its own rotary modules
    restore_rope(wrapper.model.speech_tokenizer.model)
    return wrapper
