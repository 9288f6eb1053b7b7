"""omni-qwen3: the Qwen3-Omni model family on omni-core.

Registers the model ``tiny-qwen3-omni`` (the real ``Qwen3OmniMoeForConditionalGeneration``
architecture at tiny sizes, built locally), the pipelines ``qwen3-omni-thinker`` (the MoE
thinker on vLLM) and ``qwen3-omni`` (thinker -> talker + code predictor -> code2wav) and the
bridge ``qwen3-omni-talker``. omni-core finds this package through its entry point ``qwen3`` (group
``omni_core.plugins``) -> :mod:`omni_qwen3.plugin`. Importing this package imports nothing heavy.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
