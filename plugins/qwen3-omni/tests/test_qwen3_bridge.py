"""The ``qwen3-omni-talker`` bridge (``omni_qwen3.bridge``, on omni-qwen's ``thinker_chunk``):
the embeddings and the one ``layer:K`` the thinker emits become the talker's ``embeddings`` and
``hidden``, with the prompt's ids and image sizes in the first chunk; a thinker without them is
one error naming what to set. No model: fast."""

from __future__ import annotations

import numpy as np
import pytest
from omni_qwen3.bridge import thinker_to_talker
from qwen3_helpers import image

from omni_core.outputs import HiddenStates, StageOutput, StageResult


def result(start: int, rows: int, tokens: list[int], layers: tuple[str, ...]) -> StageResult:
    arrays = {name: np.full((rows, 4), start + i, np.float32) for i, name in enumerate(layers)}
    out = StageOutput(request_id="r", token_ids=tokens, hidden_states=HiddenStates(start, arrays))
    out.prompt_token_ids = [7, 8, 9]
    whole = StageResult(stage_id=0, stage_name="thinker")
    whole.add(out)
    return whole


def test_the_bridge_hands_over_embeddings_and_the_talkers_layer():
    prompt = {"prompt": "x", "multi_modal_data": {"image": image()}}
    chunk = thinker_to_talker([result(0, 3, [100], ("embeddings", "layer:2"))], prompt, None)
    assert chunk["prompt_ids"] == [7, 8, 9] and chunk["token_ids"] == [100]
    assert chunk["start"] == 0 and chunk["image_sizes"] == [[64, 64]]
    assert chunk["embeddings"][:, 0].tolist() == [0, 0, 0]
    assert chunk["hidden"][:, 0].tolist() == [1, 1, 1]
    later = thinker_to_talker([result(3, 1, [101], ("embeddings", "layer:2"))], prompt, None)
    assert "prompt_ids" not in later and later["start"] == 3 and later["hidden"].shape == (1, 4)


@pytest.mark.parametrize(
    "layers", [("embeddings", "final"), ("layer:2",), ("embeddings", "layer:1", "layer:2")]
)
def test_a_thinker_without_embeddings_and_one_layer_is_refused_naming_them(layers):
    with pytest.raises(ValueError, match=r"'embeddings' and one 'layer:K'.*hidden_states\.layers"):
        thinker_to_talker([result(0, 3, [100], layers)], "x", None)
