"""RequestView carries what the caller sent (``messages``, ``parts``, ``text``) beside the
rendered ``prompt``; a text gate reads ``request.text`` whatever the first stage's input format."""

from __future__ import annotations

import types

import pytest

from omni_core import PLUGIN_API_VERSION, RequestRejected, hookimpl
from omni_core.chat import ChatMessage, RenderedPrompt
from omni_core.request_input import chat_input, prompt_input, rendered_input
from tests.helpers import collect

PIPE = """
name: gated
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


def text_gate(seen: list[dict]) -> types.ModuleType:
    """Rejects a request whose text holds "forbidden"; records what its hook saw."""
    module = types.ModuleType("text_gate")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(request, prompt):
        seen.append(
            {
                "prompt": prompt,
                "messages": request.messages,
                "parts": request.parts,
                "text": request.text,
            }
        )
        if "forbidden" in request.text:
            raise RequestRejected(403, "the gate refuses this text")

    module.omni_admit_request = omni_admit_request
    return module


@pytest.fixture
def gated(make_engine, fake_entry_points):
    seen: list[dict] = []
    fake_entry_points.add("text-gate", text_gate(seen))
    return make_engine(PIPE), seen


async def test_the_hook_reads_a_chats_messages_and_text(gated):
    engine, seen = gated
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    outs = [o async for o in engine.generate(messages=messages)]
    assert outs[-1].error is None
    [view] = seen
    assert view["messages"] == tuple(messages)
    assert view["parts"] == () and view["text"] == "be brief\nhello"


async def test_a_prompt_sent_as_is_has_no_messages(gated):
    engine, seen = gated
    for prompt, text in (
        ("just text", "just text"),
        ([5, 6], ""),
        ({"prompt": "in a dict"}, "in a dict"),
    ):
        await collect(engine, prompt)
        assert (seen[-1]["messages"], seen[-1]["text"]) == (None, text)


async def test_a_rendered_prompt_keeps_its_chat(gated):
    engine, seen = gated
    rendered = engine.render_chat([{"role": "user", "content": "a forbidden word"}])
    [out] = await collect(engine, rendered)
    assert out.error is not None and out.error.status_code == 403
    assert seen[-1]["messages"] == ({"role": "user", "content": "a forbidden word"},)


def test_chat_parts_are_the_non_text_parts_in_order():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}
    messages = [
        ChatMessage.model_validate(
            {"role": "user", "content": [image, {"type": "text", "text": "hi"}]}
        ),
        ChatMessage.model_validate({"role": "user", "content": [audio]}),
    ]
    got = chat_input(messages)
    assert got.parts == (image, audio) and got.text == "hi\n"
    assert rendered_input(RenderedPrompt([1, 2], "hi", 2, tuple(messages))) == got


def test_a_completions_prompt_keeps_its_text():
    assert rendered_input(RenderedPrompt([1, 2], "the text", 2)).text == "the text"
    assert prompt_input([1, 2]).text == ""
