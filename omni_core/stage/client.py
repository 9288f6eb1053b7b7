"""The protocol every stage replica client implements: transport and lifecycle, never routing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput
from omni_core.sampling import SamplingParams

if TYPE_CHECKING:
    from omni_core.config.settings import OmniSettings
    from omni_core.models import ModelResolver
    from omni_core.plugin.hooks import PluginHost

# Control RPCs whose worker exceptions must reach the caller (never ``{"supported": False}``).
CONTROL_METHODS = frozenset({"sleep", "wake_up", "pause_scheduler", "resume_scheduler"})


class StageRequest(msgspec.Struct, kw_only=True, gc=False):
    """A request as one stage replica receives it.

    ``prompt`` is token ids, a string or a dict with multimodal parts. ``streaming_input`` says that
    more input will follow through :meth:`StageClient.add_input` (a ``stream`` edge).
    ``trace_context``: W3C trace-context headers (``traceparent``...) of the request's span when
    tracing is on, for engines that trace (vLLM takes them as ``trace_headers``).
    ``stream_outputs`` False says that nothing downstream reads this stage's outputs before it
    finished (it is not a final stage, feeds no ``stream`` edge, no plugin watches outputs): the
    engine may hold its deltas back and send one finished output carrying all of them (the vLLM
    kind then asks vLLM for the final output only). Engines that ignore it stay correct.
    """

    request_id: str
    prompt: Any
    params: SamplingParams
    streaming_input: bool = False
    trace_context: dict[str, str] | None = None
    stream_outputs: bool = True


@dataclass(frozen=True)
class StageContext:
    """What a stage-kind factory gets besides its stage config: passed down by the engine, never
    looked up (docs/plugins.md "Context is passed down").

    ``settings``: the engine's settings (as built in code, not re-read from the environment);
    ``models``: model names resolved against the engine's plugin host and built under
    ``settings.cache_dir`` (:meth:`resolve_model`); ``host``: that plugin host, to ask what other
    plugins registered.
    """

    pipeline_name: str
    settings: OmniSettings
    models: ModelResolver
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("omni_core.stage"))

    @classmethod
    def bound(cls, pipeline_name: str, settings: OmniSettings, host: PluginHost) -> StageContext:
        """The context of a pipeline's stages on an engine with ``settings`` and ``host``."""
        from pathlib import Path

        from omni_core.models import ModelResolver

        return cls(pipeline_name, settings, ModelResolver(host, Path(settings.cache_dir)))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Sent to another process (a Ray actor's stage factory arguments): the settings travel
        and the host is rebuilt there from them
        (:func:`omni_core.stage.worker.stage_context_here`)."""
        from omni_core.stage.worker import stage_context_here

        return (stage_context_here, (self.pipeline_name, self.settings))

    @property
    def host(self) -> PluginHost:
        """The engine's plugin host."""
        return self.models.host

    def resolve_model(self, name_or_path: str) -> str:
        """A stage's model argument as its engine loads it: a model the engine's plugins register
        becomes its directory (built first if missing); a path or hub id is returned as given."""
        return self.models.resolve(name_or_path)


@runtime_checkable
class StageClient(Protocol):
    """One replica of one stage. All coroutines run on the orchestrator loop.

    ``get_outputs`` waits until at least one output is ready and returns every ready one (the
    orchestrator keeps exactly one such reader per replica). A dead replica makes
    ``get_outputs``/``add_request`` raise :class:`~omni_core.errors.EngineDeadError`. Unsupported
    RPC methods raise ``NotImplementedError``.
    """

    async def start(self) -> None: ...

    async def add_request(self, request: StageRequest) -> None: ...

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None: ...

    async def abort(self, request_ids: list[str]) -> None: ...

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...

    async def get_outputs(self) -> list[StageOutput]: ...

    def is_healthy(self) -> bool: ...

    async def shutdown(self) -> None: ...


class OutputSink(Protocol):
    """Where a pushing client hands over its outputs (see :class:`PushingStageClient`)."""

    def push(self, outputs: list[StageOutput]) -> None:
        """Hand over a batch of outputs; it may be routed before this returns."""

    def dead(self, error: EngineDeadError) -> None:
        """Report that the replica died (what ``get_outputs`` would raise)."""


@runtime_checkable
class PushingStageClient(StageClient, Protocol):
    """A client that can push its outputs instead of being read through ``get_outputs``.

    The orchestrator calls ``set_output_sink`` once, before the first request, and then runs no
    reader for the replica. The client calls ``sink.push(batch)`` with every ready output and
    ``sink.dead(error)`` when the replica dies, on the orchestrator loop and from a callback of
    its own (a ``call_soon`` callback, a protocol method, its own task) — never from inside a
    call the orchestrator made into it, because a push may route right away. This saves the
    reader's wake-up, one trip round the event loop per batch.
    """

    def set_output_sink(self, sink: OutputSink) -> None: ...
