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

Intermediate layers (``layer:K``, transformers' ``hidden_states[K]``: the input of decoder layer
K, hidden + residual, pre-norm) come from vLLM's auxiliary hidden-state outputs (its EAGLE-3
interface, ``SupportsEagle3``), not from a hook on the layer, which never fires once the language
model is compiled. At install the capture calls ``set_aux_hidden_state_layers`` (the stage runs
eager, so the next forward returns ``(hidden, [aux...])``; the forward hook takes the aux rows and
hands vLLM the hidden state alone). A model class built compiled sets its aux layers in its own
``__init__`` instead, keeps that forward's aux list in ``omni_aux_hidden_states`` and returns the
hidden state alone; it declares ``omni_aux_layers`` (the tuple it set), and the capture reads the
attribute (docs/models.md, Qwen3-Omni: the hidden-layer route). Cost: one extra add and a copy of
the captured rows per layer per step.

Nothing of this exists in a stage without ``hidden_states``: no hooks, no per-step work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_core.errors import OmniError
from omni_core.outputs import HiddenStates


class HiddenStatesLayerError(OmniError):
    """An intermediate layer was asked of a model that gives no auxiliary hidden states."""


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
        self.aux = sorted(int(n.split(":")[1]) for n in layers if n.startswith("layer:"))
        self.broken: str | None = None  # set when a forward brought no aux states
        self.handles = []
        for runner in va.model_runners(engine):
            model = runner.get_model()
            if self.aux:
                self._set_aux(model)
            self.handles.append(
                model.register_forward_pre_hook(self._pre_hook(model), with_kwargs=True)
            )
            self.handles.append(
                model.register_forward_hook(self._post_hook(runner), with_kwargs=True)
            )

    def _set_aux(self, model: Any) -> None:
        if tuple(getattr(model, "omni_aux_layers", ())) == tuple(self.aux):
            return  # the model class set them at construction (compiled route)
        if not hasattr(model, "set_aux_hidden_state_layers"):
            raise HiddenStatesLayerError(
                f"engine_args.hidden_states.layers {[f'layer:{k}' for k in self.aux]}: "
                f"{type(model).__name__} gives no auxiliary hidden states (vLLM's "
                "SupportsEagle3): only 'embeddings' and 'final' can be captured"
            )
        model.set_aux_hidden_state_layers(tuple(self.aux))

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
        if self.broken is not None:
            raise HiddenStatesLayerError(self.broken)
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
        def post(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            embeds, self._embeds = self._embeds, None
            aux = getattr(module, "omni_aux_hidden_states", None)
            if isinstance(output, tuple) and len(output) == 2:
                output, aux = output  # vLLM's (hidden, [aux...]): vLLM gets the hidden alone
            if not self.requests:
                return output
            req_ids, qsl, computed = self.va.batch_layout(runner)
            tensors = {"final": output, "embeddings": embeds}
            if self.aux:
                if aux is None or len(aux) != len(self.aux):
                    self.broken = (
                        f"the model's forward gave no auxiliary hidden states for layers "
                        f"{self.aux} (a compiled model must set them at construction)"
                    )
                    return output
                tensors.update({f"layer:{k}": a for k, a in zip(self.aux, aux, strict=True)})
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
            return output

        return post
