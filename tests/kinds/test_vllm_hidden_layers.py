"""``engine_args.hidden_states.layers: ["layer:K"]``: the capture's use of vLLM's auxiliary
hidden-state outputs, on fake models (no vLLM): the eager route (``set_aux_hidden_state_layers``,
a ``(hidden, [aux])`` output handed back to vLLM as the hidden alone), the compiled route (a model
class that set its aux layers at construction and keeps them in ``omni_aux_hidden_states``), and
the errors. The real-model check is plugins/qwen3-omni/tests/test_qwen3_hidden_layer.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from omni_core.kinds.vllm_hidden import HiddenStateCapture, HiddenStatesLayerError

ROWS, HIDDEN = 5, 4


class EagerAux(torch.nn.Module):
    """Like a vLLM SupportsEagle3 model: a tuple output once aux layers are set."""

    def __init__(self) -> None:
        super().__init__()
        self.aux_layers: tuple[int, ...] = ()

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.aux_layers = layers

    def forward(self, x: torch.Tensor) -> Any:
        if not self.aux_layers:
            return x
        return x, [x + k for k in self.aux_layers]


class CompiledAux(torch.nn.Module):
    """A class that set its aux layers at construction: returns the hidden alone."""

    omni_aux_layers = (2,)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        raise AssertionError("the capture must not touch a model that set its own aux layers")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.omni_aux_hidden_states = [x * 10]
        return x


class NoAux(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def capture(model: torch.nn.Module, layers: list[str]) -> HiddenStateCapture:
    runner = SimpleNamespace(get_model=lambda: model)
    va = SimpleNamespace(
        model_runners=lambda engine: [runner],
        batch_layout=lambda r: (["e1"], np.array([0, ROWS]), np.array([0])),
    )
    cap = HiddenStateCapture(None, va, layers, plane=None, inline=1 << 30)
    cap.watch("e1", "r1")
    return cap


def test_eager_route_sets_the_aux_layers_and_hands_vllm_the_hidden_alone():
    model = EagerAux()
    cap = capture(model, ["final", "layer:2", "layer:1"])
    assert model.aux_layers == (1, 2)
    x = torch.arange(ROWS * HIDDEN, dtype=torch.float32).reshape(ROWS, HIDDEN)
    out = model(x)
    assert isinstance(out, torch.Tensor) and torch.equal(out, x)  # vLLM sees no tuple
    states = cap.take("r1", finished=True)
    assert states is not None and states.start == 0
    np.testing.assert_array_equal(states.layers["final"], x.numpy())
    np.testing.assert_array_equal(states.layers["layer:1"], x.numpy() + 1)
    np.testing.assert_array_equal(states.layers["layer:2"], x.numpy() + 2)


def test_compiled_route_reads_the_aux_states_the_model_kept():
    model = CompiledAux()
    cap = capture(model, ["layer:2"])
    x = torch.ones(ROWS, HIDDEN)
    assert torch.equal(model(x), x)
    states = cap.take("r1", finished=True)
    assert states is not None
    np.testing.assert_array_equal(states.layers["layer:2"], np.full((ROWS, HIDDEN), 10.0))


def test_a_model_without_aux_outputs_is_refused_naming_the_layer_and_class():
    with pytest.raises(HiddenStatesLayerError, match=r"\['layer:3'\].*NoAux gives no auxiliary"):
        capture(NoAux(), ["layer:3"])


def test_a_forward_without_aux_states_fails_the_request():
    model = CompiledAux()
    model.forward = lambda x: x  # type: ignore[method-assign]  # kept nothing this forward
    cap = capture(model, ["layer:2"])
    model(torch.ones(ROWS, HIDDEN))
    with pytest.raises(HiddenStatesLayerError, match="no auxiliary hidden states for layers"):
        cap.take("r1", finished=True)
