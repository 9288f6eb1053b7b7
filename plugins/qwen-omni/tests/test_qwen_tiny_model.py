"""``tiny-qwen2.5-omni``: a deterministic build, the documented ids and sizes, loads in
transformers."""

from __future__ import annotations

import json

import pytest
import torch
from omni_qwen import build as tiny
from omni_qwen.plugin import TINY_MODEL, committed_checksums
from qwen_helpers import AUDIO_CHAT, TEXT_CHAT, sine

from omni_core.family import compat
from omni_core.models import tree_hashes
from omni_core.testing.parity import rebuild_in_fresh_process


def test_rebuild_in_a_fresh_process_is_byte_identical_to_the_committed_checksums(
    tiny_qwen, tmp_path
):
    fresh = rebuild_in_fresh_process(TINY_MODEL, tmp_path)
    assert fresh == tree_hashes(tiny_qwen) == committed_checksums()
    assert set(fresh) == {
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "processor_config.json",
        "spk_dict.pt",
        "tokenizer.json",
        "tokenizer_config.json",
    }


def test_tokenizer_has_the_special_tokens_at_the_documented_ids_and_len_equals_vocab(tiny_qwen):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    assert len(tok) == tiny.VOCAB == 4096
    expected = {
        "<|endoftext|>": 4000,
        "<|im_start|>": 4001,
        "<|im_end|>": 4002,
        "<|AUDIO|>": 4003,
        "<|audio_bos|>": 4004,
        "<|audio_eos|>": 4005,
        "<|vision_bos|>": 4009,
        "<|vision_eos|>": 4010,
        "<|IMAGE|>": 4012,
        "<|VIDEO|>": 4013,
        "<|tts_pad|>": 4022,
        "<|tts_bos|>": 4023,
        "<|tts_eos|>": 4024,
        "<|speaker_chelsie|>": 4025,
        "<|speaker_ethan|>": 4026,
    }
    assert {t: tok.convert_tokens_to_ids(t) for t in expected} == expected
    assert (tok.audio_token, tok.image_token, tok.vision_bos_token) == (
        "<|AUDIO|>",
        "<|IMAGE|>",
        "<|vision_bos|>",
    )
    text = "Hello world, the tiny model hears a 440 Hz tone."
    ids = tok(text)["input_ids"]
    assert max(ids) < 4000 and tok.decode(ids) == text


def test_config_ids_agree_with_the_tokenizer_and_sizes_with_each_other(tiny_qwen):
    from transformers import Qwen2_5OmniConfig

    config = Qwen2_5OmniConfig.from_pretrained(tiny_qwen)
    tiny.check_config(config)  # raises on any size that must agree
    th, tk = config.thinker_config, config.talker_config
    assert (th.audio_token_index, th.image_token_index, th.video_token_index) == (4003, 4012, 4013)
    assert (tk.audio_token_index, tk.image_token_index, tk.video_token_index) == (4003, 4012, 4013)
    assert (tk.tts_text_pad_token_id, tk.tts_text_start_token_id, tk.tts_text_end_token_id) == (
        4022,
        4023,
        4024,
    )
    assert (tk.tts_codec_pad_token_id, tk.tts_codec_end_token_id) == (8292, 8294)
    assert th.text_config.hidden_size // th.text_config.num_attention_heads == 32


def test_a_size_that_must_agree_is_refused():
    config = tiny.build_config(user_token_id=0)
    config.talker_config.embedding_size = 64
    with pytest.raises(ValueError, match="thinker hidden != talker embedding_size"):
        tiny.check_config(config)


def test_loads_in_transformers_with_speakers_processor_and_chat_template(tiny_qwen):
    from transformers import Qwen2_5OmniForConditionalGeneration, Qwen2_5OmniProcessor

    proc = Qwen2_5OmniProcessor.from_pretrained(tiny_qwen)
    assert type(proc.video_processor) is compat.stub_video_processor_class()
    assert proc.feature_extractor.feature_size == 128
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(tiny_qwen, dtype=torch.float32)
    assert set(model.speaker_map) == {"Chelsie", "Ethan"}
    assert model.speaker_map["Ethan"]["cond"].shape == (1, 16)
    assert model.speaker_map["Chelsie"]["ref_mel"].shape == (1, 64, 80)
    n_params = sum(p.numel() for p in model.thinker.parameters())
    assert 1_000_000 < n_params < 3_000_000

    text = proc.apply_chat_template(TEXT_CHAT, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n"
    )
    audio_text = proc.apply_chat_template(AUDIO_CHAT, add_generation_prompt=True, tokenize=False)
    assert "<|audio_bos|><|AUDIO|><|audio_eos|>What do you hear?" in audio_text
    inputs = proc(text=audio_text, audio=[sine()], return_tensors="pt")
    n_audio = int((inputs["input_ids"] == 4003).sum())
    assert n_audio == 25  # 1 s of audio: 100 mel frames -> 50 -> 25 placeholder tokens
    with torch.no_grad():
        out = model.generate(
            **inputs, generation_mode="text", thinker_do_sample=False, thinker_max_new_tokens=4
        )
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_stub_video_processor_refuses_videos_and_round_trips_its_sizes(tiny_qwen):
    stub = compat.stub_video_processor_class().from_pretrained(tiny_qwen)
    assert (stub.merge_size, stub.temporal_patch_size, stub.patch_size) == (2, 2, 14)
    assert (
        stub.to_dict()
        == json.loads((tiny_qwen / "processor_config.json").read_text())["video_processor"]
    )
    with pytest.raises(NotImplementedError, match="video input needs torchvision"):
        stub(videos=[])
