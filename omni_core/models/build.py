"""Builders of the tiny demo models (imports torch/transformers/tokenizers; seeded; offline).

Llama-style thinker and talker: byte-level BPE tokenizer (vocab 2048) trained on a built-in
corpus, hidden 64, 2 layers, 4 heads with head_dim 32 (vLLM's CPU attention needs >= 32),
``initializer_range`` 0.25 so outputs depend on the prompt. Vocoder: codec tokens → waveform.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VOCAB = 2048
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = (
    "the quick brown fox jumps over the lazy dog while a small model learns to speak "
    "omni core runs stages of a pipeline each stage owns an engine that turns prompts into tokens "
    "hello world this is a tiny llama with two layers and four heads hidden size sixty four "
    "user assistant system message content role answer question please thank you yes no maybe "
    "one two three four five six seven eight nine ten zero hundred thousand million "
    "red green blue yellow black white orange purple cat dog bird fish tree river mountain sea "
    "square circle image sound voice music picture light dark bright soft loud quiet "
).split()
SEEDS = {"tiny-thinker": 0, "tiny-talker": 1, "tiny-vocoder": 2}


def corpus() -> list[str]:
    """A deterministic pseudo-random corpus (an LCG; no global RNG state)."""
    x = 12345
    lines = []
    for i in range(3000):
        words = []
        for _ in range(5 + i % 17):
            x = (1103515245 * x + 12345) % (2**31)
            words.append(WORDS[x % len(WORDS)])
        lines.append(" ".join(words).capitalize() + (". " if i % 3 else "? ") + str(i))
    lines.append("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,;:!?'\"()-")
    return lines


def build_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


def build_llama(out: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=max(VOCAB, len(tokenizer)),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        initializer_range=0.25,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _save_torch(out: Path, tensors: dict[str, Any], config: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")


def build_vocoder(out: Path, seed: int) -> None:
    """Codec token → ``hop`` samples: a seeded mix of sinusoids per token (audible, not silent)."""
    import torch

    config = {"sample_rate": 16000, "hop": 320, "codebook": VOCAB, "harmonics": 4}
    gen = torch.Generator().manual_seed(seed)
    freqs = 110.0 + torch.rand(VOCAB, config["harmonics"], generator=gen) * 770.0
    amps = torch.rand(VOCAB, config["harmonics"], generator=gen) * 0.2 + 0.05
    _save_torch(out, {"freqs": freqs, "amps": amps}, config)


def build_model(name: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    seed = SEEDS[name]
    if name in ("tiny-thinker", "tiny-talker"):
        build_llama(out, seed)
    elif name == "tiny-vocoder":
        build_vocoder(out, seed)
    else:  # pragma: no cover - guarded by ensure_model
        raise ValueError(name)
