"""Building blocks for a plugin's deterministic tiny-model builder (a :class:`ModelSpec`'s
``build``): what every family of tiny checkpoints needs and nothing family-specific.

* :func:`train_qwen2_bpe`: a byte-level BPE trained offline on a corpus the builder generates,
  with Qwen2's pre-tokenizer (its split regex, NFC): the shape of the tokenizer every Qwen2-based
  checkpoint ships (Qwen2.5-Omni's thinker, Qwen-Image's text encoder). The builder adds its own
  special tokens and wraps it in its ``transformers`` tokenizer class. Same corpus, same vocab
  size: byte-identical files.
* :func:`packaged_checksums`: the SHA-256 of every file the builder writes, committed as a JSON
  file in the plugin's package, for :class:`ModelSpec`'s ``checksums`` (``omni models build
  --check``).

Both run in the calling process and import ``tokenizers`` only when called.

[`ModelSpec`]: omni_core.plugin.types.ModelSpec
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

__all__ = ["QWEN2_SPLIT", "packaged_checksums", "train_qwen2_bpe"]

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen2's pre-tokenizer split (contractions, letters, single digits, punctuation runs, spaces)."""


def train_qwen2_bpe(corpus: Iterable[str], vocab_size: int) -> Any:
    """A ``tokenizers.Tokenizer``: byte-level BPE with Qwen2's normalizer (NFC), pre-tokenizer
    (:data:`QWEN2_SPLIT`, then bytes) and decoder, trained on ``corpus`` up to ``vocab_size``
    entries (the 256 byte symbols included; fewer when the corpus has fewer merges to offer:
    check ``get_vocab_size()`` if the size matters). No special tokens: add the family's own."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def packaged_checksums(package: str, resource: str = "checksums.json") -> dict[str, str]:
    """The checksums committed in ``package``'s ``resource`` (a JSON object: each built file's
    relative ``/``-separated path → its SHA-256), as :class:`ModelSpec` takes them."""
    text = resources.files(package).joinpath(resource).read_text()
    checksums = json.loads(text)
    if not isinstance(checksums, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in checksums.items()
    ):
        raise ValueError(f"{package}/{resource}: not an object of path -> SHA-256 strings")
    return checksums
