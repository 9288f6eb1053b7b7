"""``tiny-qwen-image``: a deterministic build, sizes that agree, an export vLLM and transformers
load with the encoder's own states."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from omni_qwen_image import build as tiny
from omni_qwen_image.plugin import TINY_MODEL, committed_checksums

from omni_core.models import tree_hashes


def test_rebuild_in_a_fresh_process_is_byte_identical_to_the_committed_checksums(tiny_qi, tmp_path):
    code = (
        "import json\n"
        "from pathlib import Path\n"
        "from omni_core import OmniSettings\n"
        "from omni_core.models import ensure_model, tree_hashes\n"
        "from omni_core.plugin.hooks import PluginHost\n"
        "host = PluginHost.create(OmniSettings())\n"
        f"path = ensure_model({TINY_MODEL!r}, Path({str(tmp_path)!r}), host)\n"
        "print(json.dumps(tree_hashes(path)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    assert fresh == tree_hashes(tiny_qi) == committed_checksums()
    assert {p.split("/")[0] for p in fresh} == {
        "model_index.json",
        "scheduler",
        "text_encoder",
        "text_encoder_qwen2",
        "tokenizer",
        "transformer",
        "vae",
    }


def test_template_prefix_is_34_tokens_and_special_tokens_follow_the_bpe_vocab(tiny_qi):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qi / "tokenizer")
    prefix, suffix = tiny.PROMPT_TEMPLATE.split("{}")
    assert len(tok(prefix).input_ids) == tiny.TEMPLATE_PREFIX_TOKENS == 34
    assert len(tok(suffix).input_ids) == 5  # <|im_end|> \n <|im_start|> assistant \n
    ids = [tok.convert_tokens_to_ids(t) for t in tiny.SPECIAL_TOKENS]
    assert ids == list(range(ids[0], ids[0] + len(tiny.SPECIAL_TOKENS)))
    assert len(tok) == ids[-1] + 1 <= tiny.vocab_size(tok)
    text = "a red square next to 3 blue circles, hello world"
    assert tok.decode(tok(text).input_ids) == text


def test_sizes_agree_and_a_mismatch_is_refused(pipe):
    tiny.check_sizes(pipe.text_encoder, pipe.transformer, pipe.vae)
    assert pipe.vae_scale_factor == tiny.VAE_SCALE
    vae = tiny.build_vae()
    vae.register_to_config(z_dim=8)
    with pytest.raises(ValueError, match="in/out channels"):
        tiny.check_sizes(pipe.text_encoder, pipe.transformer, vae)


def test_qwen2_export_gives_the_vl_encoders_last_hidden_states(tiny_qi, pipe):
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    export = tiny_qi / tiny.ENCODER_DIR
    config = json.loads((export / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["hidden_size"] == tiny.HIDDEN and not config["tie_word_embeddings"]
    model = Qwen2ForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(export)
    ids = tok(tiny.PROMPT_TEMPLATE.format("two cats on a table"), return_tensors="pt").input_ids
    with torch.no_grad():
        ours = model(ids, output_hidden_states=True).hidden_states[-1][0, 34:]
        ref, mask = pipe.encode_prompt("two cats on a table", device="cpu")
    assert mask is None and ours.shape == ref[0].shape
    assert (ours - ref[0]).abs().max() <= 1e-5


def test_export_config_reads_the_lm_fields_of_flat_and_nested_vl_configs():
    from omni_qwen_image.export import qwen2_config

    flat = {  # the older Qwen2.5-VL layout: the LM's fields at the top level
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32},
    }
    nested = {"text_config": {**flat, "rope_theta": 5.0}, "vision_config": {}}
    for config, theta in ((flat, 1e6), (nested, 5.0)):
        qwen2 = qwen2_config(config, tied=False)
        assert (qwen2.hidden_size, qwen2.num_key_value_heads, qwen2.vocab_size) == (3584, 4, 152064)
        assert qwen2.rope_parameters == {"rope_type": "default", "rope_theta": theta}
        assert qwen2.architectures == ["Qwen2ForCausalLM"] and not qwen2.tie_word_embeddings


def test_without_diffusers_the_build_and_the_stage_say_how_to_install_it(monkeypatch, tmp_path):
    import importlib.util

    from omni_qwen_image import kind, plugin

    from omni_core.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "diffusers" else real(name, *a),
    )
    with pytest.raises(
        ConfigError, match=r"model 'tiny-qwen-image' needs diffusers.*qwen-image\.txt"
    ):
        plugin._build_tiny(tmp_path)
    with pytest.raises(ConfigError, match=r"stage 'dit' \(kind 'diffusers'\) needs diffusers"):
        kind.require_diffusers("stage 'dit' (kind 'diffusers')")
    assert not any(tmp_path.iterdir())
