"""A request's per-stage params are merged over the stage's pipeline defaults, field by field."""

from __future__ import annotations

import pytest

from omni_core import RequestError, SamplingParams

PIPELINE = """
name: merge
stages:
  - {id: 0, name: thinker, kind: scripted, final_output: true, final_output_type: text,
     sampling_params: {temperature: 0.7, max_tokens: 8}}
  - {id: 1, name: talker, kind: scripted, inputs: [0], final_output: true,
     sampling_params: {temperature: 0.9, top_p: 0.8, top_k: 40, repetition_penalty: 1.05,
                       extra: {voice: Ethan, style: calm}}}
"""


@pytest.fixture
def engine(make_engine):
    return make_engine(PIPELINE)


def test_a_mapping_is_merged_over_the_stage_defaults(engine):
    params = engine.request_params({"talker": {"max_tokens": 32, "extra": {"voice": "Chelsie"}}})
    talker = params["talker"]
    assert talker.max_tokens == 32
    assert (talker.temperature, talker.top_p, talker.top_k) == (0.9, 0.8, 40)
    assert talker.repetition_penalty == 1.05
    assert talker.extra == {"voice": "Chelsie", "style": "calm"}
    assert params["thinker"] == SamplingParams(temperature=0.7, max_tokens=8)


def test_request_extra_and_stage_fields_merge_through_one_mechanism(engine):
    params = engine.request_params({"thinker": {"temperature": 0.1}}, extra={"voice": "Chelsie"})
    assert params["thinker"].max_tokens == 8 and params["thinker"].temperature == 0.1
    assert params["talker"].top_k == 40 and params["talker"].extra["voice"] == "Chelsie"


def test_an_object_is_taken_whole(engine):
    params = engine.request_params({"talker": SamplingParams(max_tokens=3)})
    assert params["talker"] == SamplingParams(max_tokens=3)


def test_a_bad_merged_field_names_the_stage_and_field(engine):
    with pytest.raises(RequestError, match=r"sampling_params\['talker'\]\.top_p"):
        engine.request_params({"talker": {"top_p": 0}})
