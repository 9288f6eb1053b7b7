"""What plugins and engine kinds see of a running engine: read-only views and one port of actions.

Hooks of the request lifecycle receive a :class:`RequestView` (one run of a request, read-only)
and an :class:`OrchestratorPort` (the pipeline, the loop, and the few actions a plugin may take:
submit, forward, release a gate, fail, abort, spawn a task, emit, call a control RPC). They never
receive the orchestrator itself: its tables and parts are internals that change between releases.

The views are ``Protocol``s: the orchestrator hands its own state objects through them (no copy
on the per-token path), so they are read-only by contract. Writing to anything reached through a
view is unsupported; change state through the port.

Everything here is used on the orchestrator thread (the hooks fire there); a view must not be
kept and read from another thread. Hook authors import these from :mod:`omni_core.plugin` (the
public API's tiers: :mod:`omni_core.public`; ``tests/plugin/test_public_api.py`` holds
first-party plugins to them).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, Protocol

from omni_core.public import public_modules

if TYPE_CHECKING:
    import asyncio

    from pydantic import BaseModel

    from omni_core.config.pipeline import PipelineConfig, StageConfig
    from omni_core.config.settings import OmniSettings
    from omni_core.outputs import AbortResult, ErrorInfo, StageResult
    from omni_core.plugin.types import StageKind
    from omni_core.sampling import SamplingParams

__all__ = [
    "PUBLIC_MODULES",
    "OrchestratorPort",
    "PipelineView",
    "RequestView",
    "StageState",
    "StageView",
]

PUBLIC_MODULES: frozenset[str] = public_modules()
"""The modules a plugin may import from, each for its manifest names only (derived from
:data:`omni_core.public.TIERS`; kept for plugins that read it)."""


class StageState(Protocol):
    """One run in one stage: where it is and what the stage produced so far."""

    @property
    def result(self) -> StageResult:
        """Every output of the stage for this run so far, accumulated (text, token ids, ...)."""

    @property
    def replica(self) -> int | None:
        """The replica serving it (None before the submit)."""

    @property
    def submitted(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def deferred(self) -> bool:
        """A forward gate holds its forward (until ``OrchestratorPort.release_forward``)."""


class RequestView(Protocol):
    """One run of a request, read-only: the request itself, a parallel-sampling child
    (``"{i}_{request_id}"``) or a companion a plugin admitted with it.

    Alive from admission to its terminal; the terminal hook still receives it (final results
    readable, ``terminal`` True) but the orchestrator no longer holds it.
    """

    @property
    def run_id(self) -> str:
        """This run's id: what stages see and what the port's actions take."""

    @property
    def request_id(self) -> str:
        """The caller's request id (equal to ``run_id`` for a request without children)."""

    @property
    def index(self) -> int:
        """Parallel-sampling index (0 without children; a companion shares its request's)."""

    @property
    def prompt(self) -> Any:
        """The prompt its first stages receive, as rendered: a chat sent to a first stage with a
        tokenizer is token ids here (or ``{"prompt_token_ids", "multi_modal_data"}`` with
        media); a prompt sent as is stays as sent (``str``, token ids, ``dict``). A companion's
        is its own (``Companion.prompt``). Read what the caller sent in :attr:`messages`,
        :attr:`parts` and :attr:`text`."""

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...] | None:
        """The chat the caller sent (``omni serve`` chats, ``omni run`` without ``--raw``,
        ``generate(messages=...)``), as OpenAI-style message dicts (``role``, ``content``: a
        string or typed parts, ``name``), validated; None for a prompt sent as is."""

    @property
    def parts(self) -> tuple[Mapping[str, Any], ...]:
        """The chat's non-text content parts in order (``{"type": "image_url", "image_url":
        {"url": ...}}``, ``{"type": "input_audio", "input_audio": {"data": ..., "format":
        ...}}``), as sent, not decoded; empty for a prompt."""

    @property
    def text(self) -> str:
        """The user-visible text of the request, whatever the first stage's input format: a
        chat's every message's text (string contents, text parts), joined by newlines; a
        string prompt itself; a ``dict`` prompt's ``"prompt"`` string; a ``/v1/completions``
        prompt's text (token ids sent there: their decoding); ``""`` for token ids sent to
        ``generate()``. A companion's: its own prompt's."""

    @property
    def params(self) -> Mapping[int, SamplingParams]:
        """Sampling params by stage id."""

    @property
    def needed(self) -> Set[int]:
        """Ids of the stages this run goes through."""

    @property
    def finals(self) -> tuple[int, ...]:
        """Ids of its final stages (whose outputs reach the caller), in stage order."""

    @property
    def stages(self) -> Mapping[int, StageState]:
        """Its state in each needed stage, by stage id."""

    @property
    def tags(self) -> Mapping[str, Any]:
        """Tags and metadata admissions attached (``Admission.tags``, ``Companion.metadata``)."""

    @property
    def terminal(self) -> bool: ...

    @property
    def visible(self) -> bool:
        """False for companions (never shown to the caller)."""

    @property
    def companion_of(self) -> RequestView | None:
        """The run a companion was admitted with (None for a visible run)."""

    @property
    def companions(self) -> Sequence[RequestView]: ...


class StageView(Protocol):
    """A stage of the pipeline as resolved at start-up."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> StageConfig: ...

    @property
    def kind(self) -> StageKind: ...

    @property
    def args(self) -> BaseModel:
        """Its validated ``engine_args``."""

    @property
    def bridge(self) -> Callable[..., Any]:
        """``bridge(sources, original_prompt, params)``: its input from upstream results."""

    @property
    def output_mode(self) -> str:
        """``"ar"`` (streams deltas) or ``"whole"`` (one output at the end)."""


class PipelineView(Protocol):
    """The running pipeline: its config, its resolved stages and the validated plugin sections."""

    @property
    def config(self) -> PipelineConfig: ...

    @property
    def stages(self) -> Mapping[int, StageView]: ...

    @property
    def sections(self) -> Mapping[str, BaseModel]:
        """Plugin config sections by name (``omni_register_config_sections``), validated."""


class OrchestratorPort(Protocol):
    """The actions a hook (or an engine kind's parts) may take on the orchestrator.

    Call it on the orchestrator thread only (where the hooks run); from another thread, hand a
    callable over with :func:`omni_core.plugin.hand_off` (``hand_off(port.loop, deliver,
    item)``: ``deliver(item)`` runs on the orchestrator thread, in order with the engine's own
    hand-offs to that loop). Actions that emit outputs hand them to the
    callers at the next turn of the loop at the latest. Ids are run ids (``RequestView.run_id``);
    an id the orchestrator no longer holds makes an action a no-op.
    """

    @property
    def pipeline(self) -> PipelineView: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The orchestrator's event loop (its clock: ``loop.time()``; timers: ``call_later``)."""

    @property
    def settings(self) -> OmniSettings:
        """The engine's settings (``OMNI_*`` and what the embedder set in code), read-only: the
        bounds a plugin's own checks follow (e.g. ``max_n``)."""

    def request(self, run_id: str) -> RequestView | None:
        """A run the orchestrator holds (None once terminal or never admitted)."""

    def has_live_replica(self, stage_id: int) -> bool:
        """Whether a request could be submitted to ``stage_id`` now."""

    async def submit(
        self, run_id: str, stage_id: int, prompt: Any, *, streaming_input: bool = False
    ) -> None:
        """Send a run to a stage with this prompt (the stage must be one the run needs and not
        yet submitted; a failed submit fails the request)."""

    async def forward(self, run_id: str, stage_id: int) -> None:
        """Forward a run to ``stage_id`` from its finished inputs (bridge and gates apply)."""

    def release_forward(self, run_id: str, stage_id: int) -> None:
        """Let a forward held by ``omni_forward_gate`` happen: every gate is asked again."""

    async def fail(self, run_id: str, stage_id: int, error: ErrorInfo) -> None:
        """Fail the whole request ``run_id`` belongs to: its stages are aborted, the caller gets
        one error terminal naming ``stage_id``."""

    async def abort(self, run_ids: Sequence[str], reason: str = "abort") -> AbortResult:
        """Abort runs or requests at every stage holding them, then end them with ``reason``."""

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run a coroutine as a task on the orchestrator loop; an exception escaping it is fatal
        to the engine (catch what you can handle)."""

    def emit(self, stream: Any, item: Any) -> None:
        """Hand ``item`` to a caller stream (an object with ``loop`` and ``push(item)``), in
        emission order, batched with the orchestrator's own outputs."""

    async def collective_rpc(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: list[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Call a control method on every live replica of the addressed stages (all without
        ``stage_ids``), in stage order; one result per replica."""
