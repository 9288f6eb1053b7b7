"""A ``vllm`` stage with ``engine_args.pooling``: vLLM's pooling runner, no generation.

Each request's prompt (a text prompt put into ``pooling.template`` first; token ids as they are)
runs one prefill through the model converted to an embedding model (``token_embed``, ``ALL``
tokens, not normalized). Its one output carries the final normed hidden state of every prompt
token after ``drop_prefix`` (at most ``max_length``) as ``hidden_states`` — ``HiddenStates(start=
drop_prefix, layers={"final": float32 [rows, hidden]})``, large arrays on the data plane — and
finishes the request. Requests are batched by vLLM's scheduler like generation requests; abort
and request-scoped errors are the generation stage's (:mod:`omni_core.kinds.vllm_worker`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from omni_core.chat import ChatMessage, ChatOptions, RenderedPrompt, TokenizerRenderer, check_parts
from omni_core.chat_media import MediaBudget
from omni_core.errors import RequestError
from omni_core.kinds.vllm_worker import VllmWorkerEngine
from omni_core.outputs import HiddenStates, StageOutput
from omni_core.stage.worker import error_output, injected_fault

logger = logging.getLogger(__name__)


def resize_images(prompt: Any, area: int | None) -> Any:
    """A prompt's ``multi_modal_data["image"]`` (one Pillow image or a list) resized to about
    ``area`` pixels, aspect ratio kept, sides multiples of 32 (at least 32), Lanczos; anything
    else as is."""
    if area is None or not isinstance(prompt, dict):
        return prompt
    media = prompt.get("multi_modal_data")
    if not isinstance(media, dict) or media.get("image") is None:
        return prompt
    images = media["image"]

    def resized(image: Any) -> Any:
        from PIL import Image

        if not isinstance(image, Image.Image):
            return image
        ratio = image.width / image.height
        width = math.sqrt(area * ratio)
        size = (max(32, round(width / 32) * 32), max(32, round(width / ratio / 32) * 32))
        return image.resize(size, resample=Image.Resampling.LANCZOS)

    if isinstance(images, list | tuple):
        images = [resized(image) for image in images]
    else:
        images = resized(images)
    return {**prompt, "multi_modal_data": {**media, "image": images}}


def image_prompts(prompt: Any, image_prompt: str | None) -> Any:
    """A text prompt with ``multi_modal_data["image"]`` gets ``image_prompt`` (its ``{}`` the
    image's number from 1) once per image before its text; anything else as is."""
    if image_prompt is None or not isinstance(prompt, dict):
        return prompt
    media = prompt.get("multi_modal_data")
    text = prompt.get("prompt")
    if not isinstance(media, dict) or media.get("image") is None or not isinstance(text, str):
        return prompt
    images = media["image"]
    count = len(images) if isinstance(images, list | tuple) else 1
    prefix = "".join(image_prompt.replace("{}", str(i + 1), 1) for i in range(count))
    return {**prompt, "prompt": prefix + text}


def apply_template(template: str | None, prompt: Any) -> Any:
    """A text prompt (or ``{"prompt": text}``) put into ``template``; anything else as is."""
    if template is None:
        return prompt
    if isinstance(prompt, str):
        return template.replace("{}", prompt, 1)
    if isinstance(prompt, dict) and isinstance(prompt.get("prompt"), str):
        return {**prompt, "prompt": template.replace("{}", prompt["prompt"], 1)}
    return prompt


class PoolingRenderer(TokenizerRenderer):
    """A pooling stage's prompts stay text (the engine puts them into its template): a chat is
    its messages' text joined by newlines, counted as the templated prompt's tokens. A stage
    whose ``engine.limit_mm_per_prompt`` allows images or audio (a template with the
    placeholder, e.g. an image editor's VL encoder) takes those parts too, decoded within the
    media budget: the prompt is then ``{"prompt": text, "multi_modal_data": {...}}``."""

    def __init__(
        self,
        stage_name: str,
        tokenizer_path: str | Path,
        template: str | None,
        *,
        max_model_len: int | None = None,
        media: dict[str, int] | None = None,
        budget: MediaBudget | None = None,
    ) -> None:
        super().__init__(
            stage_name, tokenizer_path, max_model_len=max_model_len, media=media, budget=budget
        )
        self.template = template

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> RenderedPrompt:
        check_parts(messages, self)
        media: dict[str, list[Any]] = {}
        if self.media:
            for i, message in enumerate(messages):
                self._parts(i, message, media)  # decodes and counts the media parts
        rendered = self.encode("\n".join(m.text() for m in messages))
        prompt: Any = rendered.prompt
        if media:
            prompt = {"prompt": rendered.prompt, "multi_modal_data": media}
        return RenderedPrompt(prompt, rendered.text, rendered.num_tokens, tuple(messages))

    def encode(self, text: str, add_special_tokens: bool = True) -> RenderedPrompt:
        templated = apply_template(self.template, text)
        ids = self.tokenizer.encode(templated, add_special_tokens=add_special_tokens)
        checked = self._checked(ids, templated, "prompt")
        return RenderedPrompt(text, text, checked.num_tokens)


class PoolingWorkerEngine(VllmWorkerEngine):
    """The engine of a pooling stage's process (``rpc``, ``has_work`` as for generation)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from omni_core.stage.dataplane import default_plane

        args = config["args"]
        pooling = args["pooling"]
        self._open(config, pooling=True)
        self.template: str | None = pooling["template"]
        self.drop = int(pooling["drop_prefix"])
        self.max_length: int | None = pooling["max_length"]
        self.inline = int(pooling["inline_bytes"])
        self.image_area: int | None = pooling.get("image_area")
        self.image_prompt: str | None = pooling.get("image_prompt")
        self.plane = default_plane()
        self.with_payload = False
        self.hidden = None
        self.dead = False
        self.paused = False
        self.streamed = {}
        self.sub_owner = {}
        self.ready: list[StageOutput] = []
        self.faulty: set[str] = set()
        self.fresh: set[str] = set()
        self.warned: set[str] = set()
        self.idle: set[str] = set()  # pooling runs no sessions; the generation loop reads it
        self.prefilled = 0
        self._warm_up()

    def _warm_up(self) -> None:
        """One tiny prefill at start-up, so the first request does not pay vLLM's lazy init."""
        self.engine.add_request("omni-warm-up", self.va.to_prompt([1, 2, 3]), self._params())
        while self.engine.has_unfinished_requests():
            self.engine.step()

    def _params(self) -> Any:
        return self.va.pooling_params()

    def add(self, request: Any) -> None:
        rid = request.request_id
        if request.streaming_input:
            raise RequestError(
                f"request {rid}: a pooling stage takes its whole prompt at once, not streamed "
                "input (a stream edge into it)"
            )
        prompt = image_prompts(resize_images(request.prompt, self.image_area), self.image_prompt)
        prompt = self.va.to_prompt(apply_template(self.template, prompt))
        self._add_request(rid, prompt, self._params())
        fault = injected_fault(request.params)
        if fault == "add":
            raise RuntimeError(f"fault injected while adding request {rid}")
        if fault == "step":
            self.faulty.add(rid)

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        return None  # no streamed requests here (refused in add)

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.faulty.discard(rid)
        self.engine.abort_request(list(request_ids))

    def step(self) -> list[StageOutput]:
        outputs, self.ready = self.ready, []
        if self.paused or not self.engine.has_unfinished_requests():
            return outputs
        for ro in self.engine.step():
            if not ro.finished:
                continue
            try:
                outputs.append(self._pooled(ro))
            except Exception as exc:  # this request's own failure: it ends, the others go on
                outputs.append(error_output(ro.request_id, exc, self.request_errors))
        return outputs

    def _pooled(self, ro: Any) -> StageOutput:
        rid = ro.request_id
        if rid in self.faulty:
            self.faulty.discard(rid)
            raise RuntimeError(f"fault injected while stepping request {rid}")
        if getattr(ro, "error", None) is not None:
            raise RuntimeError(f"vLLM failed request {rid}: {ro.error}")
        data = ro.outputs.data
        n = int(data.shape[0])
        end = n if self.max_length is None else min(n, self.drop + self.max_length)
        if end <= self.drop:
            raise RequestError(
                f"request {rid}: the prompt is {n} tokens; this stage leaves out the first "
                f"{self.drop} (pooling.drop_prefix), so no state is left"
            )
        array = data[self.drop : end].detach().float().cpu().numpy().copy()
        layer = self.plane.put(array) if array.nbytes > self.inline else array
        return StageOutput(
            request_id=rid,
            finished=True,
            finish_reason="stop",
            hidden_states=HiddenStates(start=self.drop, layers={"final": layer}),
        )


def build(config: dict[str, Any]) -> PoolingWorkerEngine:
    return PoolingWorkerEngine(config)
