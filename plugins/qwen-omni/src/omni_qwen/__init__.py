"""omni-qwen: the Qwen2.5-Omni model family on omni-core.

Registers the model ``tiny-qwen2.5-omni`` (the real architecture at tiny sizes, built locally),
the pipelines ``qwen2.5-omni-thinker`` (the thinker on vLLM) and ``qwen2.5-omni`` (thinker →
talker → token2wav: text and speech out; ``omni run``'s default), the bridge
``qwen2.5-omni-talker``, the voice check at admission and the benchmark ``qwen-omni``. omni-core
finds this package through its entry point ``qwen`` (group ``omni_core.plugins``) ->
:mod:`omni_qwen.plugin`.
Importing this package imports nothing heavy (the shim's sitecustomize imports it at start-up).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
