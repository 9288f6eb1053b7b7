"""The family kit: what a model-family plugin (a real architecture, its tiny checkpoint, its
stages and pipelines) builds on, the manifest's model-family tier (:mod:`omni_core.public`)::

    from omni_core.family import tiny_model, lazy_pipeline, redraw, bpe_tokenizer

* registration: :func:`tiny_model`, :func:`lazy_pipeline`, :func:`lazy`;
* the tiny-checkpoint toolkit: :func:`corpus`, :func:`bpe_tokenizer`, :func:`shrink`,
  :func:`require_consistent`, :func:`redraw`, :func:`write_checkpoint`, :func:`checksums`,
  :func:`quiet_transformers`, :func:`whisper_features`, :func:`omni_chat_template`,
  :func:`omni_processor`, and the torchvision compat shim (:mod:`omni_core.family.compat`);
* checkpoint readers: :func:`local_checkpoint`, :func:`read_rows`, :func:`generation_config`,
  :func:`token_ids`, :class:`ImageGrid`; one sub-model of a checkpoint loaded strictly:
  :func:`load_part` (:func:`read_part`, :func:`fuse_experts`);
* batched autoregressive decode steps: :func:`batch_cache`, :func:`take_rows`
  (:class:`Decoding`: what they read of a request);
* audio options: :func:`audio_streamed`;
* streaming vocoder windows: :func:`causal_piece`, :func:`causal_stream`,
  :func:`exact_context` (causal), :func:`context_window`, :func:`crossfade`,
  :func:`receptive_field`, :func:`padded_render` (left/right context, cross-fade, padding).

Its parity harness lives in the testing kit (:mod:`omni_core.testing.parity`). Importing this
module imports none of the names (no torch, no transformers) until one is used.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the lazy re-exports, for type checkers)
from __future__ import annotations

from typing import TYPE_CHECKING

from omni_core.public import lazy_exports

if TYPE_CHECKING:
    from omni_core.family.audio import (
        audio_streamed,
    )
    from omni_core.family.checkpoint import (
        ImageGrid,
        generation_config,
        local_checkpoint,
        read_rows,
        token_ids,
    )
    from omni_core.family.decode import (
        Decoding,
        batch_cache,
        take_rows,
    )
    from omni_core.family.registration import (
        lazy,
        lazy_pipeline,
        tiny_model,
    )
    from omni_core.family.tiny import (
        bpe_tokenizer,
        checksums,
        corpus,
        omni_chat_template,
        omni_processor,
        quiet_transformers,
        redraw,
        require_consistent,
        shrink,
        whisper_features,
        write_checkpoint,
    )
    from omni_core.family.weights import (
        fuse_experts,
        load_part,
        read_part,
    )
    from omni_core.family.windows import (
        causal_piece,
        causal_stream,
        context_window,
        crossfade,
        exact_context,
        padded_render,
        receptive_field,
    )

__getattr__, __dir__ = lazy_exports(__name__, globals())
