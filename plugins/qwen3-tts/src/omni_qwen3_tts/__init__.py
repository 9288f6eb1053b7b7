"""omni-qwen3-tts: the Qwen3-TTS model family on omni-core.

Registers the model ``tiny-qwen3-tts`` (the official ``Qwen3TTSForConditionalGeneration`` and
12 Hz speech tokenizer at tiny sizes, three model types), the pipelines ``qwen3-tts`` and
``qwen3-tts-design`` and the ``/v1/audio/speech`` route. omni-core finds it through its entry
point ``qwen3-tts`` -> :mod:`omni_qwen3_tts.plugin`. Importing this package imports nothing heavy.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
