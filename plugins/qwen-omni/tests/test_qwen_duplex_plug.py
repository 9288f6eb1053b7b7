"""The ``qwen2.5-omni`` duplex plug without an engine: omni-qwen loads without omni-duplex (its
``omni_duplex_register_models`` impl is optional), registers the plug when omni-duplex is there,
and renders a conversation's prompt: spoken turns as audio placeholders + samples, typed turns as
text, chat-template turn markers."""

from __future__ import annotations

import numpy as np
import omni_duplex.plugin as duplex_plugin
import omni_qwen.plugin as qwen_plugin
import pytest
from omni_duplex.model import UserTurn, registered_models
from omni_qwen.duplex import AUDIO_PART, EARLIER_AUDIO, MAX_AUDIO_TURNS, render

from omni_core import ConfigError, OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.plugin import PluginHost


def host_with(fake_entry_points, *plugins):
    for name, module in plugins:
        fake_entry_points.add(name, module)
    return PluginHost.create(OmniSettings())


def test_omni_qwen_loads_without_omni_duplex(fake_entry_points):
    host = host_with(fake_entry_points, ("qwen", qwen_plugin))
    assert {"qwen2.5-omni", "qwen2.5-omni-duplex"} <= set(host.pipelines())
    from omni_core.config.resolve import resolve_pipeline

    with pytest.raises(ConfigError, match="duplex"):
        resolve_pipeline("qwen2.5-omni-duplex", host)


def test_with_omni_duplex_the_plug_is_registered(fake_entry_points):
    host = host_with(fake_entry_points, ("qwen", qwen_plugin), ("duplex", duplex_plugin))
    specs = registered_models(host)
    assert {"tiny-omni", "qwen2.5-omni"} <= set(specs)


def clip(value: float) -> np.ndarray:
    return np.full(1600, value, dtype=np.float32)


def test_spoken_turns_are_audio_typed_turns_text_with_turn_markers():
    history = [
        {"role": "user", "item_id": f"u{i}", "text": "", "audio": clip(i / 10)} for i in range(4)
    ] + [{"role": "assistant", "item_id": "a", "text": "Sure."}]
    turns = [UserTurn("n1", clip(0.9), "", 100.0), UserTurn("n2", None, "and this?")]
    prompt = render("SYS", history, turns, MAX_AUDIO_TURNS)
    text = prompt["prompt"]
    assert text.startswith("<|im_start|>system\nSYS<|im_end|>\n")
    assert text.endswith("<|im_start|>user\nand this?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nSure.<|im_end|>\n" in text
    assert text.count(AUDIO_PART) == MAX_AUDIO_TURNS == len(prompt["multi_modal_data"]["audio"])
    # the oldest spoken turn is past the audio limit: a note, not audio
    assert text.index(EARLIER_AUDIO) < text.index(AUDIO_PART)
    levels = [float(a[0]) for a, rate in prompt["multi_modal_data"]["audio"]]
    assert levels == pytest.approx([0.1, 0.2, 0.3, 0.9])
    assert {rate for _, rate in prompt["multi_modal_data"]["audio"]} == {16_000}
    assert "multi_modal_data" not in render("SYS", [], [UserTurn("t", None, "hi")], 4)


def test_the_pipeline_is_qwen_omni_as_a_duplex_engine():
    from omni_qwen.duplex import duplex_pipeline

    config = duplex_pipeline()
    assert isinstance(config, PipelineConfig) and config.engine == "duplex"
    thinker = config.stages[0].engine_args
    assert thinker["engine"] == "omni_qwen.duplex_speech:build"
    assert thinker["options"]["max_audio"] == MAX_AUDIO_TURNS
    assert thinker["options"]["resumable"] is True
    assert duplex_pipeline(resumable=False).stages[0].engine_args["options"]["resumable"] is False
    assert [s.name for s in config.stages] == ["thinker", "talker", "token2wav"]
