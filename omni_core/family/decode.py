"""Batched autoregressive decode steps for a family's torch stage: one decode row of each of
several requests in one forward, though their KV caches differ in length.

A torch-stage engine keeps one transformers ``DynamicCache`` per request; to decode a group in
one forward it left-pads their caches to the longest into one batch cache with an attention mask
hiding the padding (:func:`batch_cache`), runs the forward with each row at its own position,
then gives each request its row of the batch's cache back (:func:`take_rows`). The logits equal
each request's batch-of-one forward up to float rounding; sampling stays per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["Decoding", "batch_cache", "take_rows"]


class Decoding(Protocol):
    """What a batched decode step reads and updates of a request."""

    cache: Any  # its ``DynamicCache``, past its prefill
    past: int  # positions in ``cache``


def batch_cache(torch: Any, config: Any, states: Sequence[Decoding], device: Any = None) -> Any:
    """``(cache, mask)`` for one decode row per state: their ``DynamicCache`` s left-padded to
    the longest ``past`` into one batch cache (``config``: the model's text config) and the
    attention mask ``[len(states), longest + 1]`` hiding the padding."""
    from transformers import DynamicCache

    pasts = [s.past for s in states]
    longest = max(pasts)
    mask = torch.zeros((len(states), longest + 1), dtype=torch.long, device=device)
    for i, past in enumerate(pasts):
        mask[i, longest - past :] = 1
    cache = DynamicCache(config=config)
    for index in range(len(states[0].cache.layers)):
        keys, values = [], []
        for state, past in zip(states, pasts, strict=True):
            layer = state.cache.layers[index]
            pad = (0, 0, longest - past, 0)  # left-pad the sequence dimension
            keys.append(torch.nn.functional.pad(layer.keys, pad))
            values.append(torch.nn.functional.pad(layer.values, pad))
        cache.update(torch.cat(keys), torch.cat(values), index)
    return cache, mask


def take_rows(states: Sequence[Decoding], cache: Any) -> None:
    """After a forward on :func:`batch_cache`'s cache: each state's cache becomes its row of the
    batch's (the padding cut off again) and its ``past`` one more."""
    longest = max(s.past for s in states)
    for i, state in enumerate(states):
        past = state.past
        for mine, batched in zip(state.cache.layers, cache.layers, strict=True):
            mine.keys = batched.keys[i : i + 1, :, longest - past :].clone()  # not a view:
            mine.values = batched.values[i : i + 1, :, longest - past :].clone()  # frees the batch
        state.past = past + 1
