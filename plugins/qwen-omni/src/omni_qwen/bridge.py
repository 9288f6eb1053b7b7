"""The thinker → talker bridge (registered as ``qwen2.5-omni-talker``), and the talker → vocoder
one (``qwen2.5-omni-token2wav``, :func:`talker_codes`; omni-qwen3's code2wav uses it too).

The thinker is a ``vllm`` stage with ``engine_args.hidden_states: {layers: [embeddings, final]}``;
the talker (:mod:`omni_qwen.talker`) reads, per position, the thinker's embedding-layer output and
last hidden state, plus the prompt's token ids (to zero the multimodal positions' embeddings and
compute its 3D rope positions) and the reply's.

On an ``on_finish`` edge the bridge runs once, with everything. On a ``stream`` edge it runs for
each buffered delta of the thinker's outputs: its first call opens the talker's request (the
prompt's rows, ``gen[0]``, the prompt ids), each later call's dict goes to the talker through
``add_input``. It keeps no state: each call gets only what arrived since the last one.

The prompt's token ids come with the thinker's first output (``StageResult.prompt_token_ids``,
which a ``vllm`` stage always sets); failing that, from a ``RequestOutput`` payload. Images'
sizes come from the request's own prompt (``multi_modal_data["image"]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_core import StageResult


def thinker_to_talker(
    sources: list[StageResult], original_prompt: Any, params: Any
) -> dict[str, Any] | None:
    """The talker's input for what the thinker produced since the last call (None: nothing)."""
    return thinker_chunk(sources, original_prompt, _final)


def talker_codes(sources: list[StageResult], original_prompt: Any, params: Any) -> list[int]:
    """The talker's codes since the last call, always a list, an empty one too: a talker that
    ends without a code (a one-token reply has no text row for it; or its first code is its
    eos) still opens the vocoder's request, which voices no codes into a zero-length waveform.
    (The core's default bridge gives None for no tokens and the stage is skipped: the request
    then ends with no audio output at all, an OpenAI ``message.audio: null``.)"""
    return [int(t) for source in sources for t in source.token_ids]


def _final(layers: dict[str, Any]) -> dict[str, Any]:
    if "embeddings" not in layers or "final" not in layers:
        raise ValueError(
            "the talker needs the thinker's 'embeddings' and 'final' hidden states, got "
            f"{sorted(layers)}: set the thinker's engine_args.hidden_states.layers"
        )
    return {"embeddings": layers["embeddings"], "final": layers["final"]}


def thinker_chunk(
    sources: list[StageResult], original_prompt: Any, pick: Callable[[dict[str, Any]], Any]
) -> dict[str, Any] | None:
    """A talker's input for what the thinker produced since the last call (None: nothing):
    ``token_ids``, and with hidden states ``start`` plus what ``pick`` takes of the layers (it
    raises ValueError naming what is missing); the first chunk adds ``prompt_ids`` and
    ``image_sizes``. Also omni-qwen3's talker bridge's (its own layers)."""
    if len(sources) != 1:
        raise ValueError(f"the talker takes one upstream stage (the thinker), got {len(sources)}")
    (thinker,) = sources
    chunk: dict[str, Any] = {"token_ids": list(thinker.token_ids)}
    if thinker.hidden_states:
        start, layers = _concat(thinker.hidden_states)
        chunk.update(pick(layers), start=start)
        if start == 0:
            chunk["prompt_ids"] = _prompt_ids(thinker)
            chunk["image_sizes"] = image_sizes(original_prompt)
    elif not chunk["token_ids"]:
        return None
    return chunk


def _concat(chunks: Any) -> tuple[int, dict[str, Any]]:
    """Consecutive hidden-state chunks as one array per layer, from the first one's start."""
    import numpy as np

    start = chunks[0].start
    expected = start
    parts: dict[str, list[Any]] = {}
    for chunk in chunks:
        if chunk.start != expected:
            raise ValueError(f"thinker states chunk starts at {chunk.start}, expected {expected}")
        expected += chunk.rows
        for name, array in chunk.layers.items():
            parts.setdefault(name, []).append(array)
    return start, {
        name: arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        for name, arrays in parts.items()
    }


def _prompt_ids(thinker: StageResult) -> list[int]:
    if thinker.prompt_token_ids:
        return list(thinker.prompt_token_ids)
    for payload in thinker.payloads:
        ids = getattr(payload, "prompt_token_ids", None)
        if ids:
            return list(ids)
    raise ValueError(
        "the talker needs the thinker's prompt token ids, which a vllm stage sends with its "
        "first output: is the thinker a vllm stage?"
    )


def image_sizes(prompt: Any) -> list[list[int]]:
    """``[height, width]`` of each image of a prompt's ``multi_modal_data`` (PIL images or
    ``[height, width, channels]`` arrays)."""
    if not isinstance(prompt, dict):
        return []
    images = (prompt.get("multi_modal_data") or {}).get("image")
    if images is None:
        return []
    if not isinstance(images, (list, tuple)):
        images = [images]
    sizes = []
    for image in images:
        if hasattr(image, "size") and isinstance(image.size, tuple):  # PIL: (width, height)
            width, height = image.size
        elif hasattr(image, "shape"):
            height, width = image.shape[0], image.shape[1]
        else:
            raise ValueError(f"cannot size an image of type {type(image).__name__}")
        sizes.append([int(height), int(width)])
    return sizes
