"""omni-qwen's declared public API: what a family derived from Qwen2.5-Omni (omni-qwen3) may
import from omni-qwen, besides the family kit (:mod:`omni_core.family`). Every other module of
omni-qwen is private: it may change without notice.

* pipelines: :class:`SpeechStages`, :func:`qwen_pipeline`, :func:`thinker_stage`,
  :func:`thinker_engine_args` (a Qwen omni thinker on vLLM, the talker and vocoder stages);
* bridges: :func:`thinker_chunk` (thinker outputs -> a talker's input), :func:`talker_codes`
  (talker frames -> a vocoder's input);
* the speech benchmark's measurement: :class:`Speech`, :func:`level`, :func:`pct`;
* the tiny Qwen omni recipe (:mod:`omni_qwen.build`): the vocabulary layout (:data:`SEED`,
  :data:`BPE_VOCAB`, :data:`VOCAB`, :data:`CHATML_TOKENS`, :data:`CODE_TOKENS`), the corpus'
  :data:`ENGLISH_WORDS`, :func:`qwen_tokenizer`, the thinker's encoders at tiny sizes
  (:data:`TINY_AUDIO`, :data:`TINY_VISION`) and its weight scales (:data:`THINKER_SCALES`).

Imported lazily (PEP 562): importing this module imports none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

_HOMES = {
    "SpeechStages": "omni_qwen.pipelines",
    "qwen_pipeline": "omni_qwen.pipelines",
    "thinker_stage": "omni_qwen.pipelines",
    "thinker_engine_args": "omni_qwen.pipelines",
    "thinker_chunk": "omni_qwen.bridge",
    "talker_codes": "omni_qwen.bridge",
    "Speech": "omni_qwen.speech_bench",
    "level": "omni_qwen.speech_bench",
    "pct": "omni_qwen.speech_bench",
    **dict.fromkeys(
        (
            "SEED",
            "BPE_VOCAB",
            "VOCAB",
            "CHATML_TOKENS",
            "CODE_TOKENS",
            "ENGLISH_WORDS",
            "qwen_tokenizer",
            "TINY_AUDIO",
            "TINY_VISION",
            "THINKER_SCALES",
        ),
        "omni_qwen.build",
    ),
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
