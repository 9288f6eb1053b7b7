"""Prompts handed to vLLM: multimodal data reaches it; bad audio is refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core.kinds.vllm_adapter import to_prompt

AUDIO = (np.zeros(1600, dtype=np.float32), 16000)


def test_plain_prompts_keep_their_shape():
    assert to_prompt([1, 2, 3]) == {"prompt_token_ids": [1, 2, 3]}
    assert to_prompt("hi") == "hi"
    assert to_prompt({"prompt": "hi"}) == "hi"
    assert to_prompt({"prompt_token_ids": [4, 5]}) == {"prompt_token_ids": [4, 5]}


def test_multimodal_data_and_processor_kwargs_go_through():
    text = to_prompt({"prompt": "hi", "multi_modal_data": {"audio": AUDIO}})
    assert text["prompt"] == "hi" and text["multi_modal_data"]["audio"] is AUDIO
    ids = to_prompt(
        {
            "prompt_token_ids": [7, 8],
            "multi_modal_data": {"audio": [AUDIO, AUDIO[0]]},
            "mm_processor_kwargs": {"use_audio_in_video": False},
        }
    )
    assert ids["prompt_token_ids"] == [7, 8]
    assert ids["multi_modal_data"]["audio"][1] is AUDIO[0]
    assert ids["mm_processor_kwargs"] == {"use_audio_in_video": False}


@pytest.mark.parametrize(
    ("audio", "fragment"),
    [
        ("x", "multi_modal_data['audio']: expected a 1-D float waveform"),
        ([AUDIO, b"raw"], "multi_modal_data['audio'][1]: expected"),
        (np.zeros((2, 2, 2), dtype=np.float32), "expected a 1-D float waveform"),
        ((np.zeros(4, dtype=np.int16), 16000), "the waveform must be float, not int16"),
        ((AUDIO[0], 0), "the sample rate must be a positive number, not 0"),
        ((AUDIO[0], "16k"), "the sample rate must be a positive number, not '16k'"),
    ],
)
def test_bad_audio_is_refused_naming_the_field(audio, fragment):
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        to_prompt({"prompt": "hi", "multi_modal_data": {"audio": audio}})
