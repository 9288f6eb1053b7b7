"""``AsyncOmniEngine``: the turn-based engine (prompt in, streamed outputs out)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

from omni_core.chat import RenderedPrompt
from omni_core.engine.base import OmniEngineBase
from omni_core.engine.channel import RequestStream
from omni_core.errors import RequestError
from omni_core.messages import AddRequest
from omni_core.orchestrator.base import OrchestratorBase
from omni_core.orchestrator.turn import Orchestrator
from omni_core.outputs import OmniRequestOutput
from omni_core.request_input import rendered_input
from omni_core.sampling import SamplingParams


class AsyncOmniEngine(OmniEngineBase):
    """``AsyncOmniEngine(pipeline)``: a YAML path, a registered pipeline name or a config."""

    def create_orchestrator(self, **kwargs: Any) -> OrchestratorBase:
        return Orchestrator(**kwargs)

    async def generate(
        self,
        prompt: Any = None,
        *,
        messages: list[Any] | None = None,
        request_id: str | None = None,
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        modalities: list[str] | None = None,
    ) -> AsyncGenerator[OmniRequestOutput, None]:
        """Stream a request's outputs; exactly one has ``finished=True`` (or this raises
        :class:`~omni_core.errors.EngineDeadError`). Closing or cancelling it aborts the request.

        Give either ``prompt`` or chat ``messages`` (OpenAI's shape), rendered by the first
        stage's chat template as :meth:`render_chat` does. A prompt :meth:`render_chat` returned
        (a ``RenderedPrompt``) is sent as its rendered prompt and keeps its chat: hooks read the
        messages and their text (``RequestView.messages``, ``.text``) whatever the rendering.
        """
        runtime = self._runtime
        runtime.check_alive()
        if (prompt is None) == (messages is None):
            raise RequestError("give either a prompt or messages")
        if messages is not None:
            prompt = self.render_chat(messages)
        if isinstance(prompt, RenderedPrompt):
            source = rendered_input(prompt)
            prompt = prompt.prompt
        else:
            source = None  # the prompt is the caller's: RequestView reads it from the prompt
        rid = self.new_request_id() if request_id is None else self.check_request_id(request_id)
        if rid in runtime.streams:
            raise RequestError(f"request id '{rid}' is already in flight")
        _check_prompt(prompt)
        params = self.stage_params(sampling_params)
        if modalities is not None:
            self._check_modalities(modalities)
        stream = RequestStream(rid, asyncio.get_running_loop())
        runtime.streams[rid] = stream
        finished = False
        try:
            await runtime.inbox.put_async(
                AddRequest(
                    request_id=rid,
                    prompt=prompt,
                    params=params,
                    modalities=modalities,
                    stream=stream,
                    enqueued_at=time.monotonic(),
                    source=source,
                )
            )
            items = stream.items
            while True:
                if not items:
                    await stream.wait()
                while items:
                    item = items.popleft()
                    if isinstance(item, BaseException):
                        finished = True  # the engine died: nothing left to abort
                        raise item
                    if item.finished:
                        finished = True
                    yield item
                    if finished:
                        return
        finally:
            if runtime.streams.get(rid) is stream:
                del runtime.streams[rid]
            if not finished:
                self.abort(rid)

    def _check_modalities(self, modalities: list[str]) -> None:
        offered = {
            s.config.final_output_type
            for s in self.pipeline.stages.values()
            if s.config.final_output
        }
        unknown = [m for m in modalities if m not in offered]
        if unknown or not modalities:
            raise RequestError(f"modalities {modalities!r}: this pipeline offers {sorted(offered)}")


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str | dict):
        return
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return
    raise RequestError(
        "prompt must be a string, a list of token ids, or a dict with multimodal parts, "
        f"not {type(prompt).__name__}"
    )
