"""The compiled hidden-layer route: a Qwen3-Omni thinker class for vLLM whose intermediate layers
are set before vLLM compiles it (docs/models.md, Qwen3-Omni: the hidden-layer route).

omni-core's ``vllm`` kind reads ``layer:K`` from vLLM's auxiliary hidden-state outputs (its
EAGLE-3 interface). Eager, the capture switches them on at install; compiled
(``enforce_eager: false``), the layers are part of the traced graph, so they must be set in the
model's ``__init__``. :class:`TapThinker` does that, keeps each forward's aux list in
``omni_aux_hidden_states``, returns vLLM the hidden state alone and declares ``omni_aux_layers``
(the capture reads that attribute and leaves the model alone).

Registration: :func:`omni_qwen3.vllm_plugin.register` (omni-qwen3's ``vllm.general_plugins``
entry point, which vLLM runs in every process that builds an engine, a stage process included)
registers this class by its module path (imported only when an engine asks for it) under its own
architecture name, :data:`ARCHITECTURE`, so plain Qwen3-Omni engines are untouched. A stage picks
it with ``hf_overrides: {architectures: [ARCHITECTURE], omni_aux_layers: [K, ...]}``
(:func:`omni_qwen3.pipelines.thinker_engine_args` with ``compiled=True``); without
``omni_aux_layers`` the layer is the config's ``talker_config.accept_hidden_layer``.

Deepstack: vLLM's aux value at layer K is taken after the deepstack addition, transformers'
``hidden_states[K]`` before it, so image rows differ when K <= the deepstack levels (the same as
the eager route); such a K is logged as a warning.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.model_executor.models.qwen3_omni_moe_thinker import (
    Qwen3OmniMoeThinkerForConditionalGeneration,
)

from omni_qwen3.vllm_plugin import ARCHITECTURE

__all__ = ["ARCHITECTURE", "TapThinker", "aux_layers"]

logger = logging.getLogger(__name__)


def aux_layers(hf_config: Any) -> tuple[int, ...]:
    """The layers to tap: ``omni_aux_layers`` (hf_overrides) or the talker's accept layer."""
    layers = getattr(hf_config, "omni_aux_layers", None)
    if layers is None:
        layers = [hf_config.talker_config.accept_hidden_layer]
    return tuple(sorted({int(k) for k in layers}))


class TapThinker(Qwen3OmniMoeThinkerForConditionalGeneration):
    """vLLM's Qwen3-Omni thinker with its aux hidden-state layers set at construction."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.omni_aux_layers = aux_layers(vllm_config.model_config.hf_config)
        levels = len(getattr(self.config.vision_config, "deepstack_visual_indexes", None) or ())
        if min(self.omni_aux_layers) <= levels:
            logger.warning(
                "aux layers %s: a layer <= the %d deepstack levels, whose image rows include "
                "the deepstack features (transformers' hidden_states do not)",
                self.omni_aux_layers,
                levels,
            )
        self.set_aux_hidden_state_layers(self.omni_aux_layers)
        self.omni_aux_hidden_states: list[Any] | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().forward(*args, **kwargs)
        if isinstance(out, tuple) and len(out) == 2:
            out, self.omni_aux_hidden_states = out
        return out
