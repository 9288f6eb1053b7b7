"""Per-token hidden states of a ``vllm`` stage (``engine_args.hidden_states``), in its process.

Two hooks on the **top-level** model module, installed through vLLM's own extension point
(``collective_rpc`` with a callable, which reaches the in-process worker's model runner): a
forward pre-hook takes the LM input embeddings (``inputs_embeds``, multimodal features merged;
computed from the ids when a text-only forward passes none) and a forward hook takes the output,
the final normed hidden state. Submodule hooks would not do: vLLM compiles the language model
(its module hooks never run) and, under torch.compile, no submodule hook fires.

Each forward's rows follow the runner's batch layout of that step
(:func:`~omni_core.kinds.vllm_adapter.batch_layout`): they are cut per request and kept with
their sequence positions until the request's next output takes them, so outputs carry exactly the
positions computed since the previous one (the first output: the prompt). Rows computed again
(a preempted request is recomputed from scratch) are dropped; a gap (prefix-cached rows, which
the stage's config forbids) fails the request.

Nothing of this exists in a stage without ``hidden_states``: no hooks, no per-step work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_core.errors import OmniError
from omni_core.outputs import HiddenStates


class HiddenStatesGapError(OmniError):
    """Positions of a request were never computed (a prefix-cache hit): its states would be
    partial, so the request fails (500)."""


@dataclass
class _Rows:
    """One request's captured rows not yet emitted; ``end``: the next position expected."""

    request_id: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    emitted: int = 0
    end: int = 0
    gap: str | None = None


class HiddenStateCapture:
    def __init__(self, engine: Any, va: Any, layers: list[str], plane: Any, inline: int) -> None:
        self.va = va
        self.layers = layers
        self.plane = plane
        self.inline = inline
        self.requests: dict[str, _Rows] = {}  # engine request id -> its rows
        self.engine_ids: dict[str, str] = {}  # our request id -> engine request id
        self._embeds: Any = None
        self.handles = []
        for runner in va.model_runners(engine):
            model = runner.get_model()
            self.handles.append(
                model.register_forward_pre_hook(self._pre_hook(model), with_kwargs=True)
            )
            self.handles.append(
                model.register_forward_hook(self._post_hook(runner), with_kwargs=True)
            )

    # --- requests -------------------------------------------------------------------------------
    def watch(self, engine_id: str, request_id: str) -> None:
        self.requests[engine_id] = _Rows(request_id)
        self.engine_ids[request_id] = engine_id

    def forget(self, request_id: str) -> None:
        engine_id = self.engine_ids.pop(request_id, None)
        if engine_id is not None:
            self.requests.pop(engine_id, None)

    def take(self, request_id: str, finished: bool) -> HiddenStates | None:
        """The rows of ``request_id`` computed since its previous output (None if none)."""
        import numpy as np

        rows = self.requests.get(self.engine_ids.get(request_id, ""))
        if rows is None:
            return None
        if finished:
            self.forget(request_id)
        if rows.gap is not None:
            raise HiddenStatesGapError(rows.gap)
        if not rows.chunks:
            return None
        start = rows.emitted
        layers: dict[str, Any] = {}
        for name in self.layers:
            parts = [chunk[name] for chunk in rows.chunks]
            array = parts[0] if len(parts) == 1 else np.concatenate(parts)
            layers[name] = self.plane.put(array) if array.nbytes > self.inline else array
        rows.emitted = rows.end
        rows.chunks = []
        return HiddenStates(start=start, layers=layers)

    # --- hooks ----------------------------------------------------------------------------------
    def _pre_hook(self, model: Any) -> Any:
        want = "embeddings" in self.layers

        def pre(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            if not want or not self.requests:
                return
            embeds = kwargs.get("inputs_embeds")
            if embeds is None:  # a text-only forward: the model embeds the ids itself
                ids = kwargs.get("input_ids", args[0] if args else None)
                embeds = self.va.input_embeddings(model, ids)
            self._embeds = embeds

        return pre

    def _post_hook(self, runner: Any) -> Any:
        def post(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            embeds, self._embeds = self._embeds, None
            if not self.requests:
                return
            req_ids, qsl, computed = self.va.batch_layout(runner)
            tensors = {"final": output, "embeddings": embeds}
            for i, engine_id in enumerate(req_ids):
                rows = self.requests.get(engine_id)
                if rows is None:
                    continue
                a, b = int(qsl[i]), int(qsl[i + 1])
                position = int(computed[i])
                if position > rows.end and rows.gap is None:
                    rows.gap = (
                        f"hidden states of positions {rows.end}..{position - 1} of request "
                        f"{rows.request_id} were not computed (prefix caching?)"
                    )
                skip = max(0, rows.end - position)  # recomputed rows (after a preemption)
                if a + skip >= b:
                    continue
                rows.chunks.append(
                    {
                        name: tensors[name][a + skip : b].detach().float().cpu().numpy().copy()
                        for name in self.layers
                    }
                )
                rows.end = position + b - a

        return post
