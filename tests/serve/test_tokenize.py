"""``/tokenize`` and ``/detokenize`` (vLLM 0.32's shapes) over the first stage's tokenizer: a
scripted stage given the vllm kind's renderer of the tiny thinker (its tokenizer and chat
template), compared with transformers' own tokenizer."""

from __future__ import annotations

import types
from typing import Any

import httpx
import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.settings import OmniSettings
from omni_core.models import resolve_model
from omni_core.plugin.types import StageKind
from omni_core.testing.scripted import ScriptedStageClient
from omni_core.testing.scripted_core import ScriptedArgs
from omni_core.testing.server import running_server

pytestmark = pytest.mark.engine  # builds the tiny thinker's checkpoint and loads its tokenizer

PIPE = """
name: tok-test
stages:
  - {id: 0, name: thinker, kind: tokenized-scripted, engine_args: {num_tokens: 2}, final_output: true}
"""
HI = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def _plugin() -> types.ModuleType:
    from omni_core.kinds.vllm_kind import VllmArgs, vllm_renderer

    module = types.ModuleType("tokenized_scripted")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def make(stage: Any, replica: Any, context: Any) -> Any:
        args = ScriptedArgs.model_validate(stage.engine_args)
        return ScriptedStageClient("tok", stage.name, args)

    def renderer(stage: Any, args: Any, context: Any) -> Any:
        thinker = VllmArgs.model_validate({"model": "tiny-thinker", "max_model_len": 128})
        return vllm_renderer(stage, thinker, context)

    @hookimpl
    def omni_register_stage_kinds() -> list[StageKind]:
        return [StageKind("tokenized-scripted", make, ScriptedArgs, renderer=renderer)]

    module.omni_register_stage_kinds = omni_register_stage_kinds  # type: ignore[attr-defined]
    return module


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer  # heavy: imported by the engine-tier tests only

    return AutoTokenizer.from_pretrained(resolve_model("tiny-thinker", OmniSettings().cache_dir))


@pytest.fixture(scope="module")
def base():
    with running_server(PIPE, plugins=[("tokenized-scripted", _plugin())]) as (url, _, _):
        yield url


def post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=30)


def test_tokenize_a_prompt_as_the_tokenizer_does(base, tokenizer):
    got = post(base, "/tokenize", {"model": "tok-test", "prompt": "hello world"})
    assert got.status_code == 200, got.text
    ids = tokenizer.encode("hello world", add_special_tokens=True)
    assert got.json() == {
        "count": len(ids),
        "max_model_len": 128,
        "tokens": ids,
        "token_strs": None,
    }
    got = post(base, "/tokenize", {"prompt": "hello world", "return_token_strs": True}).json()
    assert got["token_strs"] == tokenizer.convert_ids_to_tokens(ids)


def test_tokenize_a_chat_is_the_chat_routes_prompt(base, tokenizer):
    got = post(base, "/tokenize", {"model": "tok-test", "messages": HI}).json()
    text = tokenizer.apply_chat_template(HI, add_generation_prompt=True, tokenize=False)
    assert got["tokens"] == tokenizer.encode(text, add_special_tokens=False)
    chat = post(base, "/v1/chat/completions", {"model": "tok-test", "messages": HI}).json()
    assert chat["usage"]["prompt_tokens"] == got["count"]
    both = {"messages": HI, "continue_final_message": True}
    error = post(base, "/tokenize", both).json()["error"]
    assert error["param"] == "continue_final_message"


def test_detokenize_round_trips_and_names_bad_ids(base, tokenizer):
    ids = tokenizer.encode("hello world", add_special_tokens=False)
    assert post(base, "/detokenize", {"model": "tok-test", "tokens": ids}).json() == {
        "prompt": tokenizer.decode(ids)
    }
    got = post(base, "/detokenize", {"tokens": [len(tokenizer) + 5]})
    assert got.status_code == 400 and got.json()["error"]["param"] == "tokens"
    got = post(base, "/detokenize", {"model": "other", "tokens": ids})
    assert got.status_code == 404 and got.json()["error"]["code"] == "model_not_found"
    got = post(base, "/tokenize", {"prompt": "x", "unknown": 1})
    assert got.status_code == 400 and got.json()["error"]["param"] == "unknown"
