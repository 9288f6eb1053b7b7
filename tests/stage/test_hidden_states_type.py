"""HiddenStates chunks: joined in order, gaps refused; their arrays cross the shared-memory plane."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core.outputs import HiddenStates, StageOutput, StageResult, join_hidden_states
from omni_core.stage.dataplane import SharedMemoryDataPlane, TensorHandle, materialize


def test_chunks_join_in_order_and_a_gap_is_refused():
    a = HiddenStates(start=0, layers={"final": np.ones((3, 4), np.float32)})
    b = HiddenStates(start=3, layers={"final": np.full((1, 4), 2, np.float32)})
    joined = join_hidden_states([a, b])
    assert joined["final"].shape == (4, 4) and joined["final"][3, 0] == 2
    with pytest.raises(ValueError, match="starts at 3, expected 0"):
        join_hidden_states([b])


def test_stage_result_keeps_each_outputs_chunk():
    result = StageResult(stage_id=0, stage_name="s")
    chunk = HiddenStates(start=0, layers={"embeddings": np.zeros((2, 4), np.float32)})
    result.add(StageOutput(request_id="r", token_ids=[1], hidden_states=chunk))
    result.add(StageOutput(request_id="r", token_ids=[2]))
    assert list(result.hidden_states) == [chunk] and chunk.rows == 2


def test_handles_in_a_layer_dict_are_taken_from_the_plane(tmp_path):
    plane = SharedMemoryDataPlane(str(tmp_path))
    big = np.arange(12, dtype=np.float32).reshape(3, 4)
    small = np.zeros((1, 4), np.float32)
    states = HiddenStates(start=5, layers={"final": plane.put(big), "embeddings": small})
    assert isinstance(states.layers["final"], TensorHandle)
    materialize(states, plane)
    assert np.array_equal(states.layers["final"], big) and states.layers["embeddings"] is small
    assert not list(tmp_path.iterdir())  # taken once, the file is gone
