"""The tiny-checkpoint toolkit: what a family's builder of a tiny, real-architecture checkpoint
needs besides its own config (built offline and deterministically, so its files have committed
SHA-256 checksums).

* :func:`corpus` and :func:`bpe_tokenizer`: a deterministic training corpus and a byte-level BPE
  tokenizer of a fixed size with the family's added tokens at fixed ids;
* :func:`shrink` and :func:`require_consistent`: a real config's sub-dicts at tiny sizes, and one
  error naming every size or id that does not agree;
* :func:`redraw`: deterministic random weights (one seeded generator, registration order), and
  :func:`write_checkpoint`: the model built, re-drawn and saved;
* :func:`checksums`: the SHA-256 of every file a build wrote (what ``checksums.json`` commits);
* :func:`quiet_transformers`, :func:`whisper_features`, :func:`omni_chat_template`,
  :func:`omni_processor`: the pieces every omni builder repeats.

Importing this module imports no torch or transformers: each function imports what it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "bpe_tokenizer",
    "checksums",
    "corpus",
    "omni_chat_template",
    "omni_processor",
    "quiet_transformers",
    "redraw",
    "require_consistent",
    "shrink",
    "whisper_features",
    "write_checkpoint",
]

_SYLLABLES = (
    "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru "
    "sa se si so su ta te ti to tu va ve vi vo vu za ze zi zo zu an en in on un ar er ir or ur "
    "st tr pl gr th sh ch qu"
).split()


def corpus(words: Iterable[str], seed: int, lines: int = 6000) -> list[str]:
    """A deterministic corpus (an LCG, no global RNG): ``words``, made-up words, digits and
    punctuation, so a byte-level BPE trained on it reaches a few thousand entries. The same
    ``words`` and ``seed`` give the same lines on every machine."""
    vocabulary = list(words)
    if not vocabulary:
        raise ValueError("corpus: words is empty")
    x = seed
    out = []
    for i in range(lines):
        picked = []
        for _ in range(4 + i % 13):
            x = (1103515245 * x + 12345) % (2**31)
            if x % 3:
                picked.append(vocabulary[(x >> 4) % len(vocabulary)])
            else:
                n = 1 + (x >> 8) % 4
                word = "".join(_SYLLABLES[(x >> (10 + 3 * k)) % len(_SYLLABLES)] for k in range(n))
                picked.append(word.capitalize() if (x >> 20) % 5 == 0 else word)
        sep = ".,;:!?"[i % 6]
        out.append(" ".join(picked) + sep + (f" {i}" if i % 4 == 0 else ""))
    out.append("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,;:!?'\"()-")
    return out


def bpe_tokenizer(
    lines: list[str],
    added: tuple[str, ...],
    extra: Mapping[str, str],
    bpe_vocab: int,
    vocab: int,
    eos: str = "<|im_end|>",
    pad: str = "<|endoftext|>",
) -> Any:
    """A Qwen2 fast tokenizer of exactly ``vocab`` tokens: byte-level BPE of ``bpe_vocab``
    entries trained on ``lines``, the ``added`` special tokens from id ``bpe_vocab`` on in order,
    then fillers ``<|extra_N|>`` (so every id a random model samples detokenizes). ``extra``: the
    processor's named special tokens (``audio_token``, ...)."""
    from transformers import Qwen2TokenizerFast

    from omni_core.models.tiny import train_qwen2_bpe

    tok = train_qwen2_bpe(lines, bpe_vocab)
    if tok.get_vocab_size() != bpe_vocab:
        raise RuntimeError(f"BPE vocab is {tok.get_vocab_size()} entries, not {bpe_vocab}")
    fillers = tuple(f"<|extra_{i}|>" for i in range(vocab - bpe_vocab - len(added)))
    tok.add_special_tokens(list(added + fillers))
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=tok,
        eos_token=eos,
        pad_token=pad,
        extra_special_tokens=dict(extra),
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    if len(tokenizer) != vocab:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} tokens, not {vocab}")
    return tokenizer


def shrink(real: Mapping[str, Any], **tiny: Any) -> dict[str, Any]:
    """A real (sub-)config dict with the given entries at tiny sizes; naming an entry the real
    config lacks is an error (a typo would otherwise leave the real size in place)."""
    unknown = sorted(set(tiny) - set(real))
    if unknown:
        raise KeyError(f"shrink: no such config entries: {', '.join(unknown)}")
    return {**real, **tiny}


def require_consistent(model: str, checks: Iterable[tuple[bool, str]]) -> None:
    """Raise one ``ValueError`` naming every check of ``(ok, what)`` that failed: the sizes and
    ids of a tiny config that must agree."""
    bad = [why for ok, why in checks if not ok]
    if bad:
        raise ValueError(f"{model} config inconsistent: {'; '.join(bad)}")


def redraw(model: Any, scales: tuple[tuple[str, float], ...], seed: int) -> None:
    """Re-draw every matrix (>= 2-D parameter) whose name starts with a prefix of ``scales``
    from ``N(0, std)`` of one generator seeded with ``seed``, in registration order
    (deterministic): weights at scales where a random model's greedy output depends on its
    prompt (at the default std 0.02 it falls into a short cycle at once)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() < 2:
                continue
            std = next((s for prefix, s in scales if name.startswith(prefix)), None)
            if std is not None:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def write_checkpoint(
    out: Path,
    model_class: Any,
    config: Any,
    seed: int,
    randomize: Callable[[Any], None],
    processor: Any = None,
) -> Any:
    """Build ``model_class(config)`` in float32 after ``torch.manual_seed(seed)``, re-draw its
    weights with ``randomize(model)``, and save it (safetensors) and ``processor`` (if any) into
    ``out``, transformers kept quiet. Returns the model (in eval mode)."""
    import torch

    with quiet_transformers():
        Path(out).mkdir(parents=True, exist_ok=True)
        torch.manual_seed(seed)
        model = model_class(config).to(torch.float32).eval()
        randomize(model)
        model.save_pretrained(out, safe_serialization=True)
        if processor is not None:
            processor.save_pretrained(out)
    return model


def checksums(directory: Path) -> dict[str, str]:
    """SHA-256 of every file a build wrote under ``directory``, by relative POSIX path (the
    object a family commits as ``checksums.json``: :func:`~omni_core.extend.packaged_checksums`
    reads it back)."""
    from omni_core.models import tree_hashes

    return tree_hashes(Path(directory))


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging at error level and no progress bars inside, restored after: its
    config validation warns about the *real* default ids of sub-configs it builds while
    validating, and ``save_pretrained`` draws a progress bar: noise in a builder."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def whisper_features() -> Any:
    """The Whisper audio feature extractor of the Qwen omni families (128 mel bins, 16 kHz,
    30 s windows)."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=16000,
        hop_length=160,
        chunk_length=300,
        n_fft=400,
        return_attention_mask=True,
    )


def omni_processor(
    processor_class: Any,
    tokenizer: Any,
    chat_template: str,
    image: Mapping[str, Any],
    video: Mapping[str, Any],
) -> Any:
    """A Qwen omni processor (``processor_class``: ``Qwen2_5OmniProcessor``, ...) of a tiny
    checkpoint: the PIL Qwen2-VL image processor with ``image`` sizes, the compat shim's stub
    video processor with ``video`` sizes (no torchvision needed), :func:`whisper_features`,
    ``tokenizer`` and ``chat_template``."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from omni_core.family.compat import stub_video_processor_class

    return processor_class(
        image_processor=Qwen2VLImageProcessorPil(**image),
        video_processor=stub_video_processor_class()(**video),
        feature_extractor=whisper_features(),
        tokenizer=tokenizer,
        chat_template=chat_template,
    )


def omni_chat_template(audio: str, image: str, video: str, system: str | None = None) -> str:
    """A ChatML omni chat template: ``system`` as the default system turn (None: none); audio,
    image and video parts become the given placeholders (an OpenAI ``input_audio`` part counts as
    audio)."""
    default = (
        "{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\n" + system + "<|im_end|>\n"
        "{% endif %}"
        if system is not None
        else ""
    )
    return (
        "{% for message in messages %}" + default + "<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}"
        "{{ message['content'] }}"
        "{% else %}"
        "{% for part in message['content'] %}"
        "{% if part['type'] in ('audio', 'audio_url', 'input_audio') %}"
        + audio
        + "{% elif part['type'] in ('image', 'image_url') %}"
        + image
        + "{% elif part['type'] in ('video', 'video_url') %}"
        + video
        + "{% elif part['type'] == 'text' %}"
        "{{ part['text'] }}"
        "{% endif %}"
        "{% endfor %}"
        "{% endif %}"
        "<|im_end|>\n"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
