"""The compiled hidden-layer route's wiring, without an engine: omni-qwen3's
``vllm.general_plugins`` entry point registers ``OmniQwen3TapThinker`` with vLLM's registry, the
class's layers come from ``hf_overrides`` (or the talker's accept layer), and
``thinker_engine_args(compiled=True)`` selects it. The compiled engine itself:
``test_qwen3_hidden_layer.py``."""

from __future__ import annotations

from importlib.metadata import entry_points
from types import SimpleNamespace

import pytest
from omni_qwen3.build import ACCEPT_LAYER
from omni_qwen3.pipelines import thinker_engine_args
from omni_qwen3.vllm_plugin import ARCHITECTURE, MODULE_CLASS, register

from omni_core import ConfigError

pytestmark = pytest.mark.timeout(120)


def test_the_vllm_entry_point_registers_the_tap_thinker():
    from vllm import ModelRegistry

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "omni_qwen3_tap"]
    assert ep.load() is register
    register()
    register()  # vLLM may load plugins more than once
    assert ARCHITECTURE in ModelRegistry.get_supported_archs()
    assert MODULE_CLASS == "omni_qwen3.tap:TapThinker"


def test_the_layers_come_from_hf_overrides_or_the_accept_layer():
    from omni_qwen3.tap import TapThinker, aux_layers

    assert TapThinker.__name__ == "TapThinker"
    talker = SimpleNamespace(accept_hidden_layer=24)
    assert aux_layers(SimpleNamespace(talker_config=talker)) == (24,)
    assert aux_layers(SimpleNamespace(talker_config=talker, omni_aux_layers=[3, 1, 3])) == (1, 3)


def test_compiled_thinker_args_select_the_tap_thinker():
    engine = thinker_engine_args(hidden_layer=ACCEPT_LAYER, compiled=True)["engine"]
    assert engine["enforce_eager"] is False
    assert engine["hf_overrides"] == {
        "architectures": [ARCHITECTURE],
        "omni_aux_layers": [ACCEPT_LAYER],
    }
    assert "enforce_eager" not in thinker_engine_args(hidden_layer=ACCEPT_LAYER)["engine"]
    with pytest.raises(ConfigError, match="compiled=True needs a hidden_layer"):
        thinker_engine_args(compiled=True)


def test_the_forward_keeps_the_aux_rows_and_returns_the_hidden_state(monkeypatch):
    import torch
    from omni_qwen3 import tap

    hidden, aux = torch.zeros(3, 4), [torch.ones(3, 4)]
    parent = tap.Qwen3OmniMoeThinkerForConditionalGeneration
    monkeypatch.setattr(parent, "forward", lambda self, *a, **k: (hidden, aux))
    model = tap.TapThinker.__new__(tap.TapThinker)
    torch.nn.Module.__init__(model)
    assert model.forward(None, None) is hidden
    assert model.omni_aux_hidden_states is aux
