"""``tiny-qwen3-omni``: a deterministic build, the documented ids and sizes, loads in
transformers and speaks through ``generate(return_audio=True)``."""

from __future__ import annotations

import json

import pytest
import torch
from omni_qwen3 import build as tiny
from omni_qwen3.plugin import TINY_MODEL, committed_checksums
from qwen3_helpers import AUDIO_TOKEN, IM_END
from qwen_prompts import AUDIO_CHAT, TEXT_CHAT, hf_inputs, sine

from omni_core.family import compat
from omni_core.models import tree_hashes
from omni_core.testing.parity import rebuild_in_fresh_process

pytestmark = pytest.mark.engine


def test_rebuild_with_omni_models_build_in_a_fresh_process_matches_the_committed_checksums(
    tiny_qwen3, tmp_path
):
    fresh = rebuild_in_fresh_process(TINY_MODEL, tmp_path)  # omni models build --check
    assert fresh == tree_hashes(tiny_qwen3) == committed_checksums()
    assert set(committed_checksums()) == {
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }


def test_tokenizer_has_qwen3_omni_added_tokens_at_the_real_offsets(tiny_qwen3):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen3)
    assert len(tok) == tiny.VOCAB == 4096
    # real id = 151643 + (tiny id - 4000)
    expected = {
        "<|endoftext|>": 4000,
        "<|im_start|>": 4001,
        "<|im_end|>": 4002,
        "<|vision_start|>": 4009,
        "<|vision_end|>": 4010,
        "<|image_pad|>": 4012,
        "<|video_pad|>": 4013,
        "<think>": 4024,
        "</think>": 4025,
        "<|audio_start|>": 4026,
        "<|audio_end|>": 4027,
        "<tts_pad>": 4028,
        "<tts_text_bos>": 4029,
        "<tts_text_eos>": 4030,
        "<|audio_pad|>": 4032,
    }
    assert {t: tok.convert_tokens_to_ids(t) for t in expected} == expected
    assert tok("<|im_start|>assistant\n")["input_ids"][0] == 4001
    assert len(tok("<|im_start|>assistant\n")["input_ids"]) == 3
    text = "Hello world, the tiny model hears a 440 Hz tone."
    ids = tok(text)["input_ids"]
    assert max(ids) < 4000 and tok.decode(ids) == text


def test_config_has_the_fields_vllm_and_transformers_read_and_sizes_agree(tiny_qwen3):
    from transformers import Qwen3OmniMoeConfig

    config = Qwen3OmniMoeConfig.from_pretrained(tiny_qwen3)
    tiny.check_config(config)  # raises on any size or id that must agree
    th, tk, c2w = config.thinker_config, config.talker_config, config.code2wav_config
    assert th.text_config.rope_parameters["mrope_interleaved"] is True
    assert (th.vision_config.image_size, th.vision_config.apply_vit_abs_pos_embed) == (128, True)
    assert (th.audio_token_id, th.image_token_id, th.video_token_id) == (4032, 4012, 4013)
    assert (config.tts_pad_token_id, config.tts_bos_token_id, config.tts_eos_token_id) == (
        4028,
        4029,
        4030,
    )
    assert tk.speaker_id == {"chelsie": 317, "ethan": 318, "aiden": 319}
    assert (tk.codec_bos_id, tk.codec_eos_token_id, tk.codec_pad_id) == (165, 166, 164)
    assert (tk.num_code_groups, c2w.num_quantizers, c2w.codebook_size) == (4, 4, 64)
    assert tk.accept_hidden_layer == 2 > len(th.vision_config.deepstack_visual_indexes)
    assert (c2w.upsample_rates, c2w.upsampling_ratios) == ([8, 5, 4, 3], [2, 2])


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda c: setattr(c.talker_config, "thinker_hidden_size", 64), "talker thinker_hidden"),
        (lambda c: setattr(c.code2wav_config, "num_quantizers", 8), "code2wav quantizers"),
        (lambda c: setattr(c.talker_config, "accept_hidden_layer", 1), "accept layer in deepstack"),
        (
            lambda c: c.thinker_config.text_config.rope_parameters.pop("mrope_interleaved"),
            "mrope_interleaved not set",
        ),
        (lambda c: delattr(c.thinker_config.vision_config, "image_size"), "vision image_size"),
    ],
)
def test_a_size_or_field_that_must_agree_is_refused_naming_it(change, why):
    config = tiny.build_config(tiny.build_tokenizer())
    change(config)
    with pytest.raises(ValueError, match=why):
        tiny.check_config(config)


def test_generate_with_audio_out_is_repeatable_at_24khz_80ms_per_frame(hf3):
    proc, model = hf3
    assert type(proc.video_processor) is compat.stub_video_processor_class()
    _, inputs = hf_inputs(hf3, AUDIO_CHAT, audio=[sine()])
    assert int((inputs["input_ids"] == AUDIO_TOKEN).sum()) == 13  # 1 s -> 13 audio tokens
    n_params = sum(p.numel() for p in model.thinker.parameters())
    assert 1_000_000 < n_params < 3_000_000
    wavs = []
    for _ in range(2):
        torch.manual_seed(0)
        with torch.no_grad():
            _, wav = model.generate(
                **inputs,
                speaker="Ethan",
                return_audio=True,
                thinker_max_new_tokens=8,
                thinker_do_sample=False,
                thinker_eos_token_id=IM_END,
                talker_max_new_tokens=6,
                talker_min_new_tokens=6,
            )
        wavs.append(wav)
    assert wavs[0].shape == (1, 1, 5 * 1920 - 555)  # 6 talker tokens -> 5 frames, 555 look-ahead
    assert torch.equal(wavs[0], wavs[1])
    assert 0 < float(wavs[0].abs().max()) < 1.0  # audible, below code2wav's clamp
    text = proc.apply_chat_template(TEXT_CHAT, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n"


def test_stub_video_processor_round_trips_patch_16(tiny_qwen3):
    stub = compat.stub_video_processor_class().from_pretrained(tiny_qwen3)
    assert (stub.merge_size, stub.temporal_patch_size, stub.patch_size) == (2, 2, 16)
    saved = json.loads((tiny_qwen3 / "processor_config.json").read_text())["video_processor"]
    assert stub.to_dict() == saved
