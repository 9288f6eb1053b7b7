"""Chat rendering by the vllm kind's renderer (the first stage's tokenizer and chat template),
against transformers' own ``apply_chat_template`` on the same tiny model."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from omni_core.chat import ChatOptions, parse_messages
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.settings import OmniSettings
from omni_core.errors import RequestError
from omni_core.kinds.vllm_kind import VllmArgs, vllm_renderer
from omni_core.models import resolve_model
from omni_core.plugin import PluginHost
from omni_core.stage.client import StageContext

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "x"}]},
    {"role": "assistant", "content": "hi"},
    {"role": "developer", "content": "no lists"},
    {"role": "user", "content": "what now?"},
]


def renderer(**engine_args):
    settings = OmniSettings()
    config = PipelineConfig.model_validate(
        {"name": "r", "stages": [{"id": 0, "name": "thinker", "kind": "vllm"}]}
    )
    args = VllmArgs.model_validate({"model": "tiny-thinker", "max_model_len": 128, **engine_args})
    host = PluginHost.create(settings)
    return vllm_renderer(config.stages[0], args, StageContext.bound("r", settings, host))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("tiny-thinker", OmniSettings().cache_dir))


def test_chat_is_the_tokenizers_template_without_added_special_tokens(tokenizer):
    rendered = renderer().render_chat(parse_messages(MESSAGES), ChatOptions())
    conversation = [
        {"role": "user", "content": "hello\nx"} if i == 1 else
        {"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]}
        for i, m in enumerate(MESSAGES)
    ]  # fmt: skip
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert rendered.text == text and text.endswith("<|assistant|>\n")
    assert rendered.prompt == tokenizer.encode(text, add_special_tokens=False)
    assert rendered.num_tokens == len(rendered.prompt)
    assert rendered.prompt.count(tokenizer.bos_token_id) == 1  # the template's, not doubled
    plain = renderer().render_chat(
        parse_messages(MESSAGES), ChatOptions(add_generation_prompt=False)
    )
    assert not plain.text.endswith("<|assistant|>\n")


def test_stage_chat_template_and_kwargs_override_the_tokenizers(tmp_path):
    template = "{% for m in messages %}[{{ m['role'] }}|{{ tone }}] {{ m['content'] }}{% endfor %}"
    inline = renderer(chat_template=template, chat_template_kwargs={"tone": "dry"})
    rendered = inline.render_chat(parse_messages(MESSAGES[:1]), ChatOptions())
    assert rendered.text == "[system|dry] be brief"
    per_request = ChatOptions(chat_template_kwargs={"tone": "warm"})
    assert inline.render_chat(parse_messages(MESSAGES[:1]), per_request).text.startswith(
        "[system|warm]"
    )
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0]['content'] | upper }}")
    from_file = renderer(chat_template=str(path))
    assert from_file.render_chat(parse_messages(MESSAGES[:1]), ChatOptions()).text == "BE BRIEF"


@pytest.mark.parametrize(
    ("messages", "param", "needle"),
    [
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "image_url", "image_url": {"url": "data:,"}},
                    ],
                }
            ],
            "messages[0].content[1]",
            "content part 'image_url' is not accepted by stage 'thinker'",
        ),
        ([{"role": "user", "content": "word " * 200}], "messages", "max_model_len of 128"),
        ([{"role": "user", "content": [{"text": 5}]}], "messages[0].content", "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role", "messages[0].role"),
        ([], "messages", "non-empty"),
    ],
)
def test_bad_chats_are_request_errors_naming_the_part(messages, param, needle):
    with pytest.raises(RequestError, match=r".*") as caught:
        renderer().render_chat(parse_messages(messages), ChatOptions())
    assert needle in str(caught.value) and caught.value.param.startswith(param)


def test_token_prompts_are_checked_against_the_vocabulary():
    r = renderer()
    assert r.tokens([1, 2, 3]).num_tokens == 3
    with pytest.raises(RequestError, match="outside the vocabulary") as caught:
        r.tokens([1, 10**9])
    assert caught.value.param == "prompt"
