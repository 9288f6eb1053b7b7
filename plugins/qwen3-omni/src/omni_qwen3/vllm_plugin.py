"""omni-qwen3's ``vllm.general_plugins`` entry point (vLLM runs it in every process that builds
an engine): registers :data:`ARCHITECTURE`, the compiled hidden-layer route's thinker class
(:mod:`omni_qwen3.tap`), by its module path, so nothing is imported until an engine asks for it.
"""

from __future__ import annotations

from typing import Any

ARCHITECTURE = "OmniQwen3TapThinker"
MODULE_CLASS = "omni_qwen3.tap:TapThinker"


def register() -> None:
    """Register :data:`ARCHITECTURE` with vLLM's ``ModelRegistry`` (idempotent)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODULE_CLASS)


def describe(model: Any) -> dict[str, Any]:
    """What a stage's thinker runs (``collective_rpc("apply_model", args=(describe,))``): its
    class, the aux layers it set at construction, whether vLLM compiled its language model."""
    inner = getattr(getattr(model, "language_model", None), "model", None)
    return {
        "class": type(model).__name__,
        "omni_aux_layers": list(getattr(model, "omni_aux_layers", ())),
        "compiled": bool(getattr(inner, "compiled", False))
        and not getattr(inner, "do_not_compile", True),
    }
