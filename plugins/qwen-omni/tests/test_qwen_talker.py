"""The talker engine's and the thinker → talker bridge's own contracts (no transformers
reference: that is test_qwen_talker_parity.py).

The engine runs in this process on the tiny checkpoint; its inputs are made of the transformers
thinker's output (``talker_helpers``). Bad input is a request-scoped ``RequestError`` (a 400 in a
stage process); a one-token reply gives no codes; the talker waits for the thinker (no work until
the row it needs arrives) and runs on by itself once the thinker finished; without
``stream_outputs`` it sends its codes once, at the end; ``max_tokens`` ends a request with
``length``. The bridge turns the thinker's outputs (whole, or a stream edge's deltas) into the
talker's dicts.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from omni_qwen.bridge import image_sizes, thinker_to_talker
from qwen_helpers import TEXT_CHAT, image
from talker_helpers import hf_speech, thinker_chunks, whole_input

from omni_core.errors import RequestError
from omni_core.outputs import HiddenStates, StageOutput, StageResult
from omni_core.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05, max_tokens=6)


@pytest.fixture(scope="module")
def talker(tiny_qwen):
    from omni_qwen.talker import build

    return build({"model": str(tiny_qwen), "threads": 1, "options": {}})


@pytest.fixture(scope="module")
def speech(hf):
    return hf_speech(hf, TEXT_CHAT, 6, 6, do_sample=False, waveform=False)


def request(prompt: Any, params: SamplingParams = GREEDY, **fields: Any) -> Any:
    values = {"streaming_input": False, "stream_outputs": True, **fields}
    return SimpleNamespace(request_id="r", prompt=prompt, params=params, **values)


def run(engine: Any) -> list[StageOutput]:
    outs = []
    while engine.has_work():
        outs.extend(engine.step())
    return outs


def test_the_talker_follows_the_thinker_one_token_behind(talker, speech):
    chunks = thinker_chunks(speech)  # 6 reply tokens: the talker reads rows of gen[0..4]
    talker.add(request(chunks[0], streaming_input=True))
    assert not talker.has_work()  # the prefill needs gen[0]'s row, sent with gen[1]
    talker.add_input("r", chunks[1], False)
    codes = [t for out in run(talker) for t in out.token_ids]
    assert len(codes) == 1  # step 1 needs gen[1]'s row
    for k in (2, 3):
        talker.add_input("r", chunks[k], False)
        codes += [t for out in run(talker) for t in out.token_ids]
        assert len(codes) == k
    talker.add_input("r", chunks[4], False)
    talker.add_input("r", chunks[5], True)  # done: the rest reads eos, then pad
    outs = run(talker)
    codes += [t for out in outs for t in out.token_ids]
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert codes == speech.codes
    assert not talker.requests


def test_without_stream_outputs_the_codes_come_once(talker, speech):
    talker.add(request(whole_input(speech), stream_outputs=False))
    outs = run(talker)
    assert len(outs) == 1 and outs[0].finished and outs[0].token_ids == speech.codes


def test_a_one_token_reply_gives_no_codes(talker, speech):
    one = whole_input(speech)
    prompt_len = len(speech.prompt_ids)
    one.update(token_ids=speech.generated[:1])
    one.update(embeddings=speech.embeddings[:prompt_len], final=speech.final[:prompt_len])
    talker.add(request(one))
    (out,) = run(talker)
    assert out.finished and out.finish_reason == "stop" and out.token_ids == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"extra": {"voice": "Nobody"}}, "unknown voice 'Nobody': this model has Chelsie, Ethan"),
        ({"prompt": [1, 2, 3]}, "not list"),
        ({"prompt_ids": None}, "lacks the thinker's prompt_ids"),
        ({"embeddings": None}, "hidden_states"),
        ({"start": 3}, "positions from 3, expected 0"),
        ({"image_sizes": [[56, 56]]}, "0 image(s) but 1 image size(s)"),
    ],
)
def test_bad_input_is_a_request_error(talker, speech, change, problem):
    prompt = whole_input(speech)
    params = GREEDY
    if "extra" in change:
        params = GREEDY.merged(change)
    elif "prompt" in change:
        prompt = change["prompt"]
    else:
        prompt.update(change)
    with pytest.raises(RequestError) as raised:
        talker.add(request(prompt, params))
    assert problem in str(raised.value)
    assert not talker.requests


def test_a_thinker_that_ends_short_of_its_rows_fails_the_request(talker, speech):
    short = whole_input(speech)  # the last reply rows missing: the talker cannot read on
    short.update(embeddings=speech.embeddings[:-2], final=speech.final[:-2])
    talker.add(request(short))
    outs = run(talker)
    assert outs[-1].finish_reason == "error" and outs[-1].error.status_code == 400
    assert "the talker needs position" in outs[-1].error.message


def thinker_output(start: int, rows: int, tokens: list[int], payload: Any = None) -> StageOutput:
    layers = {
        "embeddings": np.full((rows, 4), start, np.float32),
        "final": np.full((rows, 4), -start, np.float32),
    }
    return StageOutput(
        request_id="r", token_ids=tokens, payload=payload, hidden_states=HiddenStates(start, layers)
    )


def test_the_bridge_hands_over_whole_or_delta_by_delta():
    payload = SimpleNamespace(prompt_token_ids=[7, 8, 9])
    outputs = [
        thinker_output(0, 3, [100], payload),
        thinker_output(3, 1, [101], payload),
        thinker_output(4, 1, [102], payload),
    ]
    whole = StageResult(stage_id=0, stage_name="thinker")
    for out in outputs:
        whole.add(out)
    prompt = {"prompt": "x", "multi_modal_data": {"image": image()}}
    chunk = thinker_to_talker([whole], prompt, GREEDY)
    assert chunk["prompt_ids"] == [7, 8, 9] and chunk["token_ids"] == [100, 101, 102]
    assert chunk["start"] == 0 and chunk["image_sizes"] == [[56, 56]]
    assert chunk["embeddings"][:, 0].tolist() == [0, 0, 0, 3, 4]
    assert chunk["final"][:, 0].tolist() == [0, 0, 0, -3, -4]
    delta = StageResult(stage_id=0, stage_name="thinker")  # a stream edge's later buffer
    for out in outputs[1:]:
        delta.add(out)
    chunk = thinker_to_talker([delta], prompt, GREEDY)
    assert "prompt_ids" not in chunk and chunk["start"] == 3 and chunk["token_ids"] == [101, 102]
    assert chunk["embeddings"][:, 0].tolist() == [3, 4]
    assert thinker_to_talker([StageResult(stage_id=0, stage_name="thinker")], "x", GREEDY) is None


def test_the_bridge_says_what_the_thinker_lacks():
    whole = StageResult(stage_id=0, stage_name="thinker")
    whole.add(thinker_output(0, 3, [100]))  # no prompt ids (first output, payload): refused
    with pytest.raises(ValueError, match="prompt token ids"):
        thinker_to_talker([whole], "x", GREEDY)
    first = thinker_output(0, 3, [100])
    first.prompt_token_ids = [4, 5, 6]  # as a vllm stage's first output carries them
    carried = StageResult(stage_id=0, stage_name="thinker")
    carried.add(first)
    assert thinker_to_talker([carried], "x", GREEDY)["prompt_ids"] == [4, 5, 6]
    out = thinker_output(0, 3, [100], SimpleNamespace(prompt_token_ids=[1, 2, 3]))
    assert out.hidden_states is not None
    del out.hidden_states.layers["final"]
    only = StageResult(stage_id=0, stage_name="thinker")
    only.add(out)
    with pytest.raises(ValueError, match="'embeddings' and 'final'"):
        thinker_to_talker([only], "x", GREEDY)


def test_image_sizes_of_a_prompt():
    pixels = np.zeros((30, 40, 3), np.uint8)
    prompt = {"multi_modal_data": {"image": [image(), pixels]}}
    assert image_sizes(prompt) == [[56, 56], [30, 40]]
    assert image_sizes("text") == image_sizes({"prompt": "x"}) == []
