"""The talker's batched decode step: one decode row of each of several requests in one forward.

:class:`omni_qwen.talker.TalkerEngine` keeps one KV cache per request (their lengths differ) and
batches the requests decoding in an engine step (up to ``options.max_batch``) through
:func:`decode_rows`: their caches left-padded to the longest into one batch cache, an attention
mask hiding the padding, each row at its own 3D rope position; each request's cache is then its
rows of the batch's (the family kit's :func:`~omni_core.family.batch_cache` and
:func:`~omni_core.family.take_rows`). The logits equal the batch-of-one forward's up to float
rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from omni_core.family import batch_cache, take_rows


class Decoding(Protocol):
    """What a batched decode step reads and updates of a request (the talker's ``_Request``)."""

    codes: list[int]  # the codes so far: the last one is this step's codec input
    cache: Any  # its ``DynamicCache``, past its prefill
    past: int  # positions in ``cache``
    rope_delta: int


def decode_rows(torch: Any, talker: Any, states: Sequence[Decoding], rows: Any, device: Any) -> Any:
    """The last-position logits (``[len(states), vocab]``) of one forward of ``talker`` (the
    transformers talker) over one decode row per request: ``rows[i]`` (``[len(states), hidden]``,
    before the talker's projection) plus the codec embedding of ``states[i]``'s last code. Each
    state gets its new cache row and ``past + 1``."""
    with torch.inference_mode():
        codec = talker.get_input_embeddings()
        previous = torch.tensor([[s.codes[-1]] for s in states], device=device)
        inputs = codec(previous) + rows[:, None]
        positions = torch.tensor(
            [s.past + s.rope_delta for s in states], dtype=torch.long, device=device
        ).reshape(1, -1, 1)
        cache, mask = batch_cache(torch, talker.config, states, device)
        out = talker(
            inputs_embeds=inputs,
            attention_mask=mask,
            position_ids=positions.expand(3, -1, -1),
            past_key_values=cache,
            use_cache=True,
        )
        take_rows(states, cache)
        return out.logits[:, -1]
