"""The transformers reference of the talker (and token2wav) for the omni-qwen tests.

:func:`hf_speech` runs ``Qwen2_5OmniForConditionalGeneration.generate`` with audio output, the
thinker greedy, and records what the thinker returned (its ids and per-step hidden states), the
codes the talker generated (cut at the first stop code, as ``generate`` does before token2wav),
the talker's logits per step and its 3D rope positions. :func:`thinker_chunks` turns that thinker
result into the talker's inputs, as the ``qwen2.5-omni-talker`` bridge makes them of the vLLM
thinker's outputs.

**The talker's attention mask.** transformers 5.19's ``generate`` drops an all-ones attention
mask before calling the model, and the talker's ``forward`` computes its 3D rope positions and
adds the codec pad/bos embeddings to its prompt only when it gets a mask. So ``generate()`` as
installed runs the talker without either (its positions are plain, its prompt lacks the codec
embeddings), unlike the talker's own code path (and transformers 4.x, whose ``generate`` passed
the mask: the model's intended inputs). The reference keeps the mask (:func:`talker_forward`
passes the all-ones mask ``generate`` dropped); ``keep_mask=False`` gives ``generate()`` as is.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qwen_helpers import hf_inputs

STOP_CODES = (8292, 8294)  # generate()'s talker_eos_token_id (the codec pad and end ids)


@dataclass
class Speech:
    prompt_ids: list[int]
    generated: list[int]  # the thinker's reply ids
    embeddings: Any  # float32 [prompt + generated - 1, hidden]: hidden_states[0] per position
    final: Any  # the same for hidden_states[-1]
    codes: list[int]  # the talker's codes, cut at the first stop code
    waveform: Any  # generate()'s waveform (float32 numpy)
    positions: Any  # the talker's 3D rope positions of its prefill ([3, 1, prompt + 2])
    logits: list[Any]  # the talker's logits (float32 [vocab]) of each forward


def hf_speech(
    hf: Any,
    chat: list[dict[str, Any]],
    thinker_tokens: int,
    talker_tokens: int,
    seed: int | None = None,
    speaker: str = "Chelsie",
    eos_at: int | None = None,
    waveform: bool = True,
    keep_mask: bool = True,
    **talker: Any,
) -> Speech:
    """``generate(..., return_audio)`` with a greedy thinker; ``talker`` holds the talker's
    ``generate`` arguments without their ``talker_`` prefix (``do_sample=False``: greedy);
    media (``audio=[...]``, ``images=[...]``) go to the processor. ``seed``:
    ``torch.manual_seed`` just before ``generate`` (the greedy thinker draws nothing, so the
    talker's sampling and token2wav's noise start from it). ``eos_at``: the thinker's reply gets
    its eos token at that index (as a thinker that went on past its eos would have), before
    ``generate`` builds the talker's input from it (its per-row rewrite then applies).
    ``waveform=False`` skips token2wav (its DiT is most of the time). ``keep_mask``: see the
    module's docstring."""
    import torch

    media = {k: talker.pop(k) for k in ("audio", "images") if k in talker}
    _, inputs = hf_inputs(hf, chat, **media)
    model = hf[1]
    seen: dict[str, Any] = {}
    thinker_generate, talker_generate = model.thinker.generate, model.talker.generate

    def thinker(*args: Any, **kwargs: Any) -> Any:
        seen["thinker"] = result = thinker_generate(*args, **kwargs)
        if eos_at is not None:
            prompt_len = kwargs["input_ids"].shape[1]
            result.sequences[0, prompt_len + eos_at] = model.thinker.generation_config.eos_token_id
        return result

    def talk(*args: Any, **kwargs: Any) -> Any:
        seen["talker"] = result = talker_generate(*args, **kwargs)
        seen["talker_input"] = kwargs["input_ids"].shape[1]
        return result

    rope_index = model.talker.get_rope_index

    def positions(*args: Any, **kwargs: Any) -> Any:
        seen.setdefault("positions", rope_index(*args, **kwargs)[0])
        return rope_index(*args, **kwargs)

    model.thinker.generate, model.talker.generate = thinker, talk
    model.talker.get_rope_index = positions
    if not waveform:
        model.token2wav.forward = lambda code, **kwargs: torch.zeros(0)
    extra = {"talker_pixel_values": None} if "images" in media else {}  # a transformers bug
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad(), talker_forward(model.talker, keep_mask) as logits:
            _, wave = model.generate(
                **inputs,
                speaker=speaker,
                thinker_do_sample=False,
                thinker_max_new_tokens=thinker_tokens,
                talker_max_new_tokens=talker_tokens,
                **{f"talker_{k}": v for k, v in talker.items()},
                **extra,
            )
    finally:
        del model.thinker.generate, model.talker.generate  # the class's methods again
        del model.talker.get_rope_index
        model.token2wav.__dict__.pop("forward", None)
    prompt = inputs["input_ids"][0].tolist()
    result = seen["thinker"]
    generated = result.sequences[0, len(prompt) :].tolist()
    steps = result.hidden_states  # per generated token: the layers' states of that forward
    codes = seen["talker"][0, seen["talker_input"] :].tolist()
    cut = next((i for i, c in enumerate(codes) if c in STOP_CODES), len(codes))
    return Speech(
        prompt_ids=prompt,
        generated=generated,
        embeddings=torch.cat([step[0][0] for step in steps]).numpy(),
        final=torch.cat([step[-1][0] for step in steps]).numpy(),
        codes=codes[:cut],
        waveform=wave.numpy(),
        positions=seen.get("positions"),
        logits=logits,
    )


@contextlib.contextmanager
def talker_forward(talker: Any, keep_mask: bool = False) -> Iterator[list[Any]]:
    """Record a talker module's last-position logits per forward (the list it yields); with
    ``keep_mask``, give a forward called without an attention mask the all-ones mask
    ``generate`` dropped."""
    import torch

    forward = type(talker).forward
    logits: list[Any] = []

    @functools.wraps(forward)  # generate() inspects the forward's signature
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if keep_mask and kwargs.get("attention_mask") is None:
            cache = kwargs.get("past_key_values")
            past = cache.get_seq_length() if cache is not None else 0
            rows = kwargs.get("inputs_embeds")
            if rows is None:
                rows = kwargs["input_ids"]
            kwargs["attention_mask"] = torch.ones((1, past + rows.shape[1]), dtype=torch.long)
        out = forward(talker, *args, **kwargs)
        logits.append(out.logits[0, -1].float().clone())
        return out

    talker.forward = recorded
    try:
        yield logits
    finally:
        del talker.forward


def thinker_chunks(speech: Speech, image_sizes: Any = ()) -> list[dict[str, Any]]:
    """The talker's inputs as a ``stream`` edge delivers them: one per thinker output (output k
    carries reply token k and the rows of the positions it computed: the prompt first, then
    the token before it)."""
    prompt_len = len(speech.prompt_ids)
    chunks = []
    for k, token in enumerate(speech.generated):
        lo, hi = (0, prompt_len) if k == 0 else (prompt_len + k - 1, prompt_len + k)
        chunks.append(
            {
                "token_ids": [token],
                "start": lo,
                "embeddings": speech.embeddings[lo:hi],
                "final": speech.final[lo:hi],
            }
        )
    chunks[0].update(prompt_ids=speech.prompt_ids, image_sizes=[list(s) for s in image_sizes])
    return chunks


def whole_input(speech: Speech, image_sizes: Any = ()) -> dict[str, Any]:
    """The talker's input as an ``on_finish`` edge delivers it: everything at once."""
    return {
        "prompt_ids": speech.prompt_ids,
        "image_sizes": [list(s) for s in image_sizes],
        "token_ids": speech.generated,
        "start": 0,
        "embeddings": speech.embeddings,
        "final": speech.final,
    }
