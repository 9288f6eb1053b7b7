"""Helpers shared by the omni-qwen3 tests (the chats and the sine: qwen_prompts, in omni-qwen's
tests): the tiny vocab's ids, a 64x64 image, transformers' greedy reply and speech."""

from __future__ import annotations

from typing import Any

from qwen_prompts import gradient, hf_inputs

IM_END = 4002
AUDIO_TOKEN, IMAGE_TOKEN = 4032, 4012
# audio and an image in one user turn (what transformers' talker cannot place without the
# thinker's audio config: see speech())
AUDIO_IMAGE_CHAT = [
    {
        "role": "user",
        "content": [
            {"type": "audio"},
            {"type": "image"},
            {"type": "text", "text": "What is this?"},
        ],
    }
]


def image() -> Any:
    """A 64x64 RGB gradient (4 merged vision tokens at the tiny processor's sizes)."""
    return gradient(64)


def greedy(hf: Any, chat: list[dict[str, Any]], new_tokens: int, **media: Any) -> Any:
    """transformers' greedy thinker reply: ``(text, inputs, generated ids)`` (the tiny vocab's
    ``<|im_end|>`` as EOS: generate() defaults to the real id 151645)."""
    import torch

    text, inputs = hf_inputs(hf, chat, **media)
    with torch.no_grad():
        out = hf[1].generate(
            **inputs,
            return_audio=False,
            thinker_do_sample=False,
            thinker_max_new_tokens=new_tokens,
            thinker_eos_token_id=IM_END,
        )
    sequences = out.sequences if hasattr(out, "sequences") else out
    return text, inputs, sequences[0, inputs["input_ids"].shape[1] :].tolist()


def speech(
    hf: Any,
    chat: list[dict[str, Any]],
    thinker_tokens: int,
    frames: int,
    sample: bool = False,
    voice: str = "Ethan",
    eos_at: int | None = None,
    seed: int = 0,
    **media: Any,
) -> dict[str, Any]:
    """transformers' ``generate(return_audio=True)`` with a greedy thinker (``torch.manual_seed
    (seed)`` first: the talker's draws when ``sample``): the reply ids, the talker's codes
    (frame-major, every group; ``talker_max_new_tokens`` is ``frames + 1``, its last first code
    never gets residual codes), the waveform, and the thinker's rows as omni-qwen3's bridge hands
    them over (``emb``: ``hidden_states[0]``, ``hid``: ``hidden_states[accept layer 2]``).
    ``eos_at``: the reply gets the eos token at that index before the talker's input is built.

    The reference is given what transformers 5.19's talker lacks for a prompt with audio and an
    image: its ``get_rope_index`` reads ``config.audio_config.n_window``, which only the
    thinker's config has (``generate`` raises AttributeError otherwise); the thinker's audio
    config is set on the talker's config (read for such prompts only), as omni-qwen3's talker
    engine does."""
    import torch

    _, inputs = hf_inputs(hf, chat, **media)
    model = hf[1]
    if not hasattr(model.talker.config, "audio_config"):
        model.talker.config.audio_config = model.config.thinker_config.audio_config
    seen: dict[str, Any] = {}
    thinker_generate, decode = model.thinker.generate, model.code2wav.chunked_decode

    def thinker(*args: Any, **kwargs: Any) -> Any:
        seen["thinker"] = result = thinker_generate(*args, **kwargs)
        if eos_at is not None:
            result.sequences[0, kwargs["input_ids"].shape[1] + eos_at] = IM_END
        return result

    def record(codes: Any, *args: Any, **kwargs: Any) -> Any:
        seen["codes"] = codes
        return decode(codes, *args, **kwargs)

    model.thinker.generate, model.code2wav.chunked_decode = thinker, record
    try:
        torch.manual_seed(seed)
        with torch.no_grad():
            _, wave = model.generate(
                **inputs,
                speaker=voice,
                return_audio=True,
                thinker_do_sample=False,
                thinker_max_new_tokens=thinker_tokens,
                thinker_eos_token_id=IM_END,
                talker_do_sample=sample,
                talker_max_new_tokens=frames + 1,
            )
    finally:
        del model.thinker.generate, model.code2wav.chunked_decode
    result, prompt_len = seen["thinker"], inputs["input_ids"].shape[1]
    ids = result.sequences[0].tolist()
    return {
        "codes": seen["codes"][0].T.reshape(-1).tolist(),
        "wave": wave.reshape(-1).numpy(),
        "prompt_ids": ids[:prompt_len],
        "reply": ids[prompt_len:],
        "emb": torch.cat([h[0] for h in result.hidden_states], 1)[0].numpy(),
        "hid": torch.cat([h[2] for h in result.hidden_states], 1)[0].numpy(),
    }
