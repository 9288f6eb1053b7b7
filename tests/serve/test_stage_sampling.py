"""A chat's ``sampling_params``: later stages' fields by stage name (e.g. a talker's spoken length),
merged over their pipeline defaults, bounded (a 400 naming the field), the first stage and unknown
stages refused; on the voice kit's pipeline (tests/serve/voice_kit.py), no model needed."""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import running_server
from tests.serve.voice_kit import PIPELINE, plugin

CHAT = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def server():
    with running_server(PIPELINE, plugins=[("voice-kit", plugin())]) as running:
        yield running


def post(server, **body) -> httpx.Response:
    body = {"model": "voice-test", "messages": CHAT, "modalities": ["text", "audio"], **body}
    return httpx.post(f"{server[0]}/v1/chat/completions", json=body, timeout=30)


def audio_tokens(reply: httpx.Response) -> int:
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]["completion_tokens_details"]["audio_tokens"]


def test_a_later_stages_max_tokens_sets_how_much_it_says(server):
    default = audio_tokens(post(server))
    shorter = audio_tokens(post(server, sampling_params={"speaker": {"max_tokens": 1}}))
    assert default == 3 and shorter == 1  # the speaker's 3 tokens a chunk, then 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"talker": {"max_tokens": 4097}}, "'sampling_params.talker.max_tokens'"),
        ({"talker": {"max_tokens": 0}}, "'sampling_params.talker.max_tokens'"),
        ({"talker": {"temperature": 3}}, "'sampling_params.talker.temperature'"),
        ({"talker": {"n": 2}}, "'sampling_params.talker.n': unknown field"),
        ({"thinker": {"max_tokens": 2}}, "'sampling_params.thinker': not a later stage"),
        ({"vocoder": {"max_tokens": 2}}, "'sampling_params.vocoder': not a later stage"),
    ],
)
def test_a_bad_stage_field_is_a_400_naming_it(server, fields, named):
    reply = post(server, sampling_params=fields)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["message"].startswith(named) and error["param"] == "sampling_params"
