"""``OmniEngineBase``: owns the orchestrator thread, the queues, correlated calls and shutdown.

Seams for subclasses: :meth:`validate_deployment` (before any stage starts) and
:meth:`create_orchestrator` (on the orchestrator thread, after stages started). What an engine
kind talks to its orchestrator with: :meth:`call` (a correlated message, answered by the
orchestrator's ``reply``), :meth:`post` (a one-way message), :meth:`track_stream` /
:meth:`untrack_stream` (caller streams that get ``EngineDeadError`` when the engine dies) and
:attr:`orchestrator`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from omni_core.chat import (
    ChatOptions,
    PromptRenderer,
    RenderedPrompt,
    parse_messages,
    pipeline_renderer,
)
from omni_core.config.resolve import ResolvedPipeline, resolve_pipeline
from omni_core.config.settings import OmniSettings
from omni_core.engine.runtime import EngineRuntime
from omni_core.errors import ConfigError, RequestError
from omni_core.messages import AbortRequest, CollectiveRpc, RpcCall
from omni_core.orchestrator.ids import caller_id_problem
from omni_core.outputs import AbortResult
from omni_core.plugin.hooks import PluginHost
from omni_core.sampling import SamplingParams

if TYPE_CHECKING:
    from omni_core.config.pipeline import PipelineConfig
    from omni_core.engine.channel import RequestStream
    from omni_core.orchestrator.base import OrchestratorBase

logger = logging.getLogger(__name__)


class OmniEngineBase:
    """Start-up, liveness, control calls and shutdown shared by every engine kind."""

    def __init__(
        self,
        pipeline: str | Path | PipelineConfig | ResolvedPipeline,
        *,
        settings: OmniSettings | None = None,
        plugins: PluginHost | None = None,
    ) -> None:
        from omni_core.engine.factory import engine_host

        self.settings, self.plugins = engine_host(settings, plugins)
        self.pipeline = (
            pipeline
            if isinstance(pipeline, ResolvedPipeline)
            else resolve_pipeline(pipeline, self.plugins)
        )
        self._id_prefix = f"omni-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count()
        self.default_params = self._default_params()
        self._check_engine_kind()
        self.validate_deployment()
        self.metrics_server: Any = None
        metrics = None
        if self.settings.metrics_port is not None:  # embedded engines expose /metrics too
            from omni_core.serve.metrics import OmniMetrics

            metrics = OmniMetrics()
            self.plugins.register(metrics, "omni-metrics")
        self._runtime = EngineRuntime(self.pipeline, self.settings, self.plugins)
        self._finalizer = weakref.finalize(self, self._runtime.shutdown, 1.0)
        self._runtime.start(self.create_orchestrator, self.settings.startup_timeout_s)
        if metrics is not None and self.settings.metrics_port is not None:
            from omni_core.serve.metrics import serve_metrics

            self.metrics_server = serve_metrics(
                metrics, self, self.settings.metrics_port, self.settings.host
            )

    # --- seams ----------------------------------------------------------------------------------
    def validate_deployment(self) -> None:
        """Check the pipeline before any stage starts (raise ConfigError). Default: nothing."""

    def _check_engine_kind(self) -> None:
        selected = self.pipeline.engine_class
        if not issubclass(type(self), selected):
            config = self.pipeline.config
            raise ConfigError(
                [
                    f"{config.source}: field 'engine': pipeline '{config.name}' selects engine "
                    f"'{config.engine}' ({selected.__name__}), not {type(self).__name__}; build it "
                    "with omni_core.create_engine()"
                ]
            )

    def create_orchestrator(self, **kwargs: Any) -> OrchestratorBase:
        """Build the orchestrator (called on the orchestrator thread after stages started)."""
        raise NotImplementedError

    # --- construction helpers -------------------------------------------------------------------
    @classmethod
    async def create(cls, pipeline: Any, **kwargs: Any) -> Self:
        """Build the engine without blocking the running event loop while stages start."""
        return await asyncio.to_thread(cls, pipeline, **kwargs)

    def _default_params(self) -> dict[int, SamplingParams]:
        problems = []
        params = {}
        for sid, stage in self.pipeline.stages.items():
            where = f"{self.pipeline.config.stage_label(stage.config)}: field 'sampling_params'"
            try:
                params[sid] = SamplingParams.from_mapping(stage.config.sampling_params, where)
            except RequestError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError(problems)
        return params

    # --- prompts -------------------------------------------------------------------------------
    @functools.cached_property
    def prompt_renderer(self) -> PromptRenderer:
        """How the first stage renders chats and counts prompt tokens (built on first use)."""
        return pipeline_renderer(self.pipeline, self.settings)

    def render_chat(self, messages: Any, options: ChatOptions | None = None) -> RenderedPrompt:
        """OpenAI-style messages → the first stage's prompt, rendered by its chat template and
        tokenized (what ``omni serve`` sends for a chat request); raises RequestError."""
        return self.prompt_renderer.render_chat(parse_messages(messages), options or ChatOptions())

    # --- request ids and params -----------------------------------------------------------------
    def new_request_id(self) -> str:
        return f"{self._id_prefix}-{next(self._ids)}"

    def check_request_id(self, request_id: Any) -> str:
        """A caller's request id: a non-empty string without control characters, outside the
        namespace of the ids the engine derives (parallel-sampling children ``"{i}_{id}"``), so
        that no caller id is another request's internal id. Raises RequestError."""
        problem = caller_id_problem(request_id)
        if problem is not None:
            raise RequestError(problem)
        return str(request_id)

    def stage_params(
        self, sampling_params: SamplingParams | dict[str, Any] | None
    ) -> dict[int, SamplingParams]:
        """Per-stage params: one object for all stages (taken whole), or a mapping stage name →
        params, where a ``SamplingParams`` is taken whole and a mapping of fields is merged over
        the stage's pipeline defaults (:meth:`SamplingParams.updated`); stages not named keep
        their defaults."""
        if sampling_params is None:
            return self.default_params
        if isinstance(sampling_params, SamplingParams):
            checked = sampling_params.validate()
            self._check_n(checked, "sampling_params")
            return {sid: checked for sid in self.default_params}
        if not isinstance(sampling_params, dict):
            raise RequestError(
                "sampling_params must be a SamplingParams or a mapping stage name -> params, "
                f"not {type(sampling_params).__name__}"
            )
        by_name = {s.name: sid for sid, s in self.pipeline.stages.items()}
        params = dict(self.default_params)
        for name, value in sampling_params.items():
            if name not in by_name:
                raise RequestError(
                    f"sampling_params: unknown stage '{name}' (stages: {', '.join(by_name)})"
                )
            where = f"sampling_params['{name}']"
            if isinstance(value, SamplingParams):
                params[by_name[name]] = self._check_n(value.validate(where), where)
            elif isinstance(value, dict):  # merged over the stage's defaults, field by field
                merged = self.default_params[by_name[name]].updated(value, where)
                params[by_name[name]] = self._check_n(merged, where)
            else:
                raise RequestError(f"{where} must be SamplingParams or a mapping")
        return params

    def request_params(
        self,
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        *,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, SamplingParams]:
        """Every stage's params by stage name (what ``generate(sampling_params=...)`` takes), as
        :meth:`stage_params` resolves ``sampling_params``, with request-level ``extra`` fields
        merged into each stage's ``params.extra`` (the request's keys win). The request-level
        fields of omni-core: ``voice`` (the speaker of the stages that synthesize speech; others
        ignore it). Raises RequestError."""
        if extra is not None and not isinstance(extra, dict):
            raise RequestError(f"extra must be a mapping, not {type(extra).__name__}")
        names = {sid: stage.name for sid, stage in self.pipeline.stages.items()}
        return {
            names[sid]: params.with_extra(extra) if extra else params
            for sid, params in self.stage_params(sampling_params).items()
        }

    def _check_n(self, params: SamplingParams, where: str) -> SamplingParams:
        if params.n > self.settings.max_n:
            raise RequestError(
                f"{where}.n: {params.n} parallel samples asked, at most {self.settings.max_n} "
                "allowed (OMNI_MAX_N)",
                param="n",
            )
        return params

    # --- what engine kinds talk to their orchestrator with ---------------------------------------
    @property
    def orchestrator(self) -> OrchestratorBase | None:
        """The running orchestrator (None before it started or after start-up failed). It lives
        on the orchestrator thread: from another thread, read only what is safe to read."""
        return self._runtime.orchestrator

    def post(self, msg: Any) -> bool:
        """Queue a one-way message for the orchestrator (its ``dispatch_message``); False when
        the request queue is full. Raises EngineDeadError once the engine is dead or shut down."""
        runtime = self._runtime
        runtime.check_alive()
        return runtime.inbox.put_nowait(msg)

    def track_stream(self, key: str, stream: RequestStream) -> None:
        """Register a caller stream: if the engine dies it receives the EngineDeadError."""
        self._runtime.streams[key] = stream

    def untrack_stream(self, key: str, stream: RequestStream) -> None:
        """Forget a stream registered under ``key`` (if it is still the one registered)."""
        streams = self._runtime.streams
        if streams.get(key) is stream:
            del streams[key]

    def pipeline_plugin(self, plugin: str) -> Any:
        """The object plugin ``plugin``'s ``omni_pipeline_plugin`` made for this engine's
        pipeline (None: it made none, or the plugin does not take part). Its state is written on
        the orchestrator thread: read it as the plugin documents (e.g. under the plugin's lock)."""
        return self._runtime.hooks.pipeline_objects().get(plugin)

    # --- liveness, health -----------------------------------------------------------------------
    def is_alive(self) -> bool:
        return self._runtime.is_alive()

    def health(self) -> dict[str, Any]:
        """Liveness and per-stage, per-replica health."""
        orchestrator = self._runtime.orchestrator
        stages = orchestrator.health() if orchestrator is not None else {}
        return {"alive": self.is_alive(), "stages": stages}

    @property
    def num_active_requests(self) -> int:
        """Requests the orchestrator still holds (0 once every request is terminal)."""
        orchestrator = self._runtime.orchestrator
        return len(orchestrator.parents) if orchestrator is not None else 0

    def request_tables(self) -> dict[str, int]:
        """Sizes of the orchestrator's request tables (all 0 when nothing is in flight)."""
        orchestrator = self._runtime.orchestrator
        if orchestrator is None:
            return {"requests": 0, "runs": 0, "bindings": 0}
        return {
            "requests": len(orchestrator.parents),
            "runs": len(orchestrator.runs),
            "bindings": orchestrator.table.bindings(),
        }

    # --- abort ----------------------------------------------------------------------------------
    def abort(self, request_ids: str | list[str], reason: str = "abort") -> None:
        """Fire-and-forget abort; unknown or finished ids are a quiet no-op."""
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        if not ids or self._runtime.dead_reason is not None:
            return
        try:
            self._runtime.inbox.put_nowait(AbortRequest(request_ids=ids, reason=reason), force=True)
        except Exception:  # shut down meanwhile: nothing left to abort
            pass

    async def abort_async(
        self, request_ids: str | list[str], timeout: float | None = None
    ) -> AbortResult:
        """Abort and wait until every stage that held the requests confirmed."""
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        key = ("abort", uuid.uuid4().hex)
        result = await self.call(key, AbortRequest(request_ids=ids, rpc_key=key), timeout)
        assert isinstance(result, AbortResult)
        return result

    # --- control RPCs ---------------------------------------------------------------------------
    async def collective_rpc(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: list[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Call ``method`` on every live replica of the addressed stages; one result each."""
        key = ("collective", uuid.uuid4().hex)
        timeout = self.settings.rpc_timeout_s if timeout is None else timeout
        call = RpcCall(method, tuple(args), kwargs or {}, stage_ids, timeout)
        result = await self.call(key, CollectiveRpc(rpc_key=key, call=call), timeout)
        return list(result)

    async def sleep(self, level: int = 1, stage_ids: list[int] | None = None) -> list[Any]:
        return await self.collective_rpc("sleep", (level,), stage_ids=stage_ids)

    async def wake_up(
        self, tags: list[str] | None = None, stage_ids: list[int] | None = None
    ) -> list[Any]:
        return await self.collective_rpc("wake_up", (tags,), stage_ids=stage_ids)

    async def pause_scheduler(self, stage_ids: list[int] | None = None) -> list[Any]:
        return await self.collective_rpc("pause_scheduler", stage_ids=stage_ids)

    async def resume_scheduler(self, stage_ids: list[int] | None = None) -> list[Any]:
        return await self.collective_rpc("resume_scheduler", stage_ids=stage_ids)

    async def call(self, key: tuple[str, str], msg: Any, timeout: float | None) -> Any:
        """Send a message the orchestrator answers with ``reply(key, result)`` and wait for the
        result: register, submit and wait under one timeout budget (TimeoutError; a timeout
        cancels nothing). ``key`` is unique per call, e.g. ``("mykind", uuid4().hex)``."""
        runtime = self._runtime
        runtime.check_alive()
        fut = runtime.router.register(key)
        try:
            async with asyncio.timeout(timeout):
                await runtime.inbox.put_async(msg)
                return await asyncio.wrap_future(fut)
        finally:
            runtime.router.unregister(key, fut)

    # --- shutdown -------------------------------------------------------------------------------
    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the engine (idempotent, bounded); pending ``generate()`` calls raise."""
        self._finalizer.detach()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server = None
        self._runtime.shutdown(self.settings.shutdown_timeout_s if timeout is None else timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.shutdown)
