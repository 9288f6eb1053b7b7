"""Every hook omni-core calls. Plugins implement them with ``@omni_core.hookimpl``.

Conventions:

* ``omni_register_*`` hooks *provide* objects (frozen dataclasses from
  :mod:`omni_core.plugin.types`). All impls are called; results are merged; two plugins providing
  the same name is a :class:`~omni_core.errors.PluginConflictError` naming both.
* ``omni_request_*`` / ``omni_stage_*`` observers are called impl by impl: one failing observer is
  logged and the others still run (each observer impl is guarded when its plugin registers).
* Every hook is called through pluggy's hook caller: ``wrapper=True`` / ``hookwrapper=True`` impls
  wrap any hook, and ``OMNI_TRACE_HOOKS=1`` traces every call.
* Decision hooks say how results combine in their docstring.
* pluggy calls are synchronous: impls are plain functions (never ``async def``). Hooks that need
  I/O return data, or coroutine *factories* the orchestrator schedules on its loop.
* Impls may accept any subset of a hook's arguments.

"Orchestrator thread" below means the engine's orchestrator thread and event loop, in the process
that created the engine. Request-lifecycle hooks receive ``request`` (a read-only
:class:`~omni_core.views.RequestView` of the run) and ``port`` (the
:class:`~omni_core.views.OrchestratorPort`: the pipeline, the loop and the actions a plugin may
take), never the orchestrator; ``run_id`` is ``request.run_id`` (``request_id``, the same run id,
is its deprecated API 2 name: an impl taking it gets a ``DeprecationWarning`` when it registers;
the caller's id is ``request.request_id``). ``pipeline`` is a
:class:`~omni_core.views.PipelineView` in every hook. Nobody calls ``pm.hook`` directly:
:class:`omni_core.plugin.hooks.PluginHost` is the typed facade.

A plugin's per-pipeline state lives on the object its :func:`omni_pipeline_plugin` returns (a
plugin object per pipeline, as pytest's ``LFPlugin(config)``), never in module globals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import pluggy

from omni_core.plugin import hookspec

if TYPE_CHECKING:
    from omni_core.outputs import ErrorInfo, StageOutput
    from omni_core.plugin.types import (
        Admission,
        Benchmark,
        Bridge,
        CliGroup,
        ConfigSection,
        EngineKind,
        ForwardGate,
        ModelSpec,
        PipelineSpec,
        RunOption,
        ServerRoute,
        StageKind,
    )
    from omni_core.sampling import SamplingParams
    from omni_core.views import OrchestratorPort, PipelineView, RequestView

# --------------------------------------------------------------------------------------------
# Registration (main process; each registry is collected the first time a PluginHost uses it —
# engine start, CLI start — then cached for that host)
# --------------------------------------------------------------------------------------------


@hookspec(historic=True)
def omni_addhooks(plugin_manager: pluggy.PluginManager) -> None:
    """Add a plugin's own hookspecs (``plugin_manager.add_hookspecs(module)``).

    Fires once per plugin manager, in the main process, as each plugin registers (historic: late
    registrants are called too). Result: none.
    """


@hookspec
def omni_register_stage_kinds() -> Iterable[StageKind]:
    """Provide stage kinds (``kind:`` of a pipeline stage).

    Fires when a PluginHost is built (main process). Results of all plugins are merged; a name
    provided twice fails start-up listing both providers.
    """
    return ()


@hookspec
def omni_register_bridges() -> Iterable[Bridge]:
    """Provide named bridges (``bridge:`` of a stage). Merged; duplicate names conflict."""
    return ()


@hookspec
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    """Provide named pipelines (``omni run NAME``). Merged; duplicate names conflict."""
    return ()


@hookspec
def omni_register_models() -> Iterable[ModelSpec]:
    """Provide models built locally by name (``omni models build NAME``, and any
    ``engine_args.model: NAME``, which builds it on first use).

    Fires when a PluginHost first needs the model registry (``omni models``, a stage resolving
    its model), in that caller's thread. Merged; a name provided twice conflicts.
    """
    return ()


@hookspec
def omni_register_engine_kinds() -> Iterable[EngineKind]:
    """Provide engine classes selected by a pipeline's ``engine:`` field (built-in: ``turn``).

    The class must subclass :class:`~omni_core.engine.base.OmniEngineBase`. Merged; duplicate
    names conflict.
    """
    return ()


@hookspec
def omni_register_config_sections() -> Iterable[ConfigSection]:
    """Provide extra top-level pipeline sections, each validated by its pydantic model.

    A pipeline with an unregistered top-level key fails validation. The model is validated with
    ``context={"pipeline": PipelineConfig}`` (cross-checks against the stages may use it).
    Merged; duplicates conflict.
    """
    return ()


@hookspec
def omni_register_cli_groups() -> Iterable[CliGroup]:
    """Provide typer apps mounted as ``omni NAME``. Fires when the ``omni`` CLI starts."""
    return ()


@hookspec
def omni_register_run_options() -> Iterable[RunOption]:
    """Provide flags of ``omni run PIPELINE`` (``--NAME VALUE``), each mapped onto the request's
    ``params.extra``: a plugin's per-request options by name.

    Fires when ``omni run`` starts (main process, the CLI's thread), before any stage starts.
    Results of all plugins are merged; a flag provided by two plugins, or named like one of
    ``omni run``'s own options, is a PluginConflictError naming both (exit 2). ``omni run``
    accepts a plugin's flags only on the pipelines that plugin takes part in (``omni_applies_to``
    and the rules of docs/plugins.md); the ``extra`` fields of the flags given are merged, and
    ``--extra KEY=VALUE`` fields are merged over them.
    """
    return ()


@hookspec
def omni_register_server_routes() -> Iterable[ServerRoute]:
    """Provide routes mounted by ``omni serve``. Fires when the server starts."""
    return ()


@hookspec
def omni_register_benchmarks() -> Iterable[Benchmark]:
    """Provide benchmarks run by ``omni bench NAME`` (only when named). Fires when ``omni bench``
    runs. Merged; a name taken by a built-in benchmark or provided twice conflicts."""
    return ()


# --------------------------------------------------------------------------------------------
# Which pipelines a plugin takes part in (engine start, caller's thread)
# --------------------------------------------------------------------------------------------


@hookspec
def omni_applies_to(pipeline: PipelineView) -> bool | None:
    """Say whether this plugin takes part in ``pipeline``'s requests (its per-pipeline hooks:
    admission, output interception, forward gates, abort expansion, background tasks, shutdown
    work and the observers below).

    Asked once per engine start, for each plugin implementing it on its own (through a subset
    hook caller), only when the pipeline does not already use the plugin (``requires_plugins``,
    a config section, stage kind, bridge or engine kind it registered). True: it takes part;
    False or None: it does not. A plugin without this hook that registers nothing a pipeline
    can use takes part in every pipeline. ``pipeline``: the resolved pipeline, read-only. See
    :mod:`omni_core.plugin.scope`.
    """


@hookspec
def omni_pipeline_voices(pipeline: PipelineView) -> Iterable[str] | None:
    """Say which voices ``pipeline``'s speech can take (``params.extra["voice"]``), without
    loading a model: names a checkpoint's config lists, or a builder's constants.

    Fires in the caller's thread before any stage starts (``omni run --voice NAME``), for the
    plugins taking part in ``pipeline`` only (``omni_applies_to`` and the rules of
    docs/plugins.md). ``pipeline``: the resolved pipeline, read-only. None: this plugin does not
    say (the speaking stage checks the voice when a request reaches it). The voices of all impls
    that return some are merged; a voice outside them is refused before any model loads (exit 2,
    naming the voices). Raising is a PluginError naming the plugin.
    """


@hookspec
def omni_pipeline_plugin(pipeline: PipelineView, port: OrchestratorPort) -> object | None:
    """Provide this plugin's object for one pipeline: an object (any class) whose ``omni_*``
    methods, marked ``@hookimpl``, take part in that pipeline's hooks only, and which holds the
    plugin's state for it (pytest's per-run plugin objects).

    Fires once per engine start, on the orchestrator thread, when the orchestrator is built
    (``port`` is its port: keep it; its actions work once requests arrive), for the plugins
    taking part in ``pipeline`` only. None: no object. The object's methods may implement the
    per-pipeline hooks (:data:`~omni_core.plugin.scope.PER_PIPELINE_HOOKS` but this one); another
    hook fails the engine's start naming the plugin. Its hooks are called next to the module's
    own impls of the same hooks; it is unregistered when the engine shuts down (after
    ``omni_shutdown`` and the last ``omni_request_terminal``). Results are merged: a plugin
    returns one object.
    """


# --------------------------------------------------------------------------------------------
# Request lifecycle decisions (orchestrator thread)
# --------------------------------------------------------------------------------------------


# ``request_id``: the run id's API 2 name (deprecated; impls that take it are warned once, when
# they register).
_RUN_ID = {
    "request_id": DeprecationWarning(
        "the hook argument 'request_id' is deprecated: take 'run_id' (the same run id; "
        "docs/plugins.md#migrating-from-api-2-to-api-3)"
    )
}


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_admit_request(
    run_id: str,
    request_id: str,
    request: RequestView,
    prompt: Any,
    pipeline: PipelineView,
    params: dict[int, SamplingParams],
    port: OrchestratorPort,
) -> Admission | None:
    """Expand a request into a bundle before it is registered (e.g. extra guidance passes).

    ``request`` is the run about to be admitted (not held yet: ``port.request(run_id)`` is
    None); ``prompt`` and ``params`` (sampling params by stage id) are its fields, read-only;
    ``pipeline`` is ``port.pipeline``.

    Fires on the orchestrator thread once per admitted request (and per parallel-sampling child),
    before the request is registered. All impls are called; their companions are admitted together
    with the request, all or nothing: if any impl raises, nothing is admitted and the request gets
    one terminal error naming the plugin (400), or, for
    :class:`~omni_core.errors.RequestRejected`, that error's own 4xx status and message. Tags of
    all admissions are merged into ``request.tags``. Companion ids are
    ``f"{run_id}{companion.suffix}"``; companions go to the same replicas as their request
    and are never shown to the caller.
    """


@hookspec(firstresult=True, warn_on_impl_args=_RUN_ID)
def omni_intercept_stage_output(
    run_id: str,
    request_id: str,
    request: RequestView,
    stage_id: int,
    output: StageOutput,
    port: OrchestratorPort,
) -> bool | None:
    """Take a stage output before it is emitted or forwarded. Return True to consume it.

    Orchestrator thread, for every stage output of every request (companions included), after
    ``request.stages[stage_id].result`` recorded it: keep it cheap. First non-None result wins
    (then the orchestrator subclass's ``intercept_stage_output`` seam is not asked). Implementing
    it makes every stage stream its deltas.
    """


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_forward_gate(
    run_id: str, request_id: str, request: RequestView, stage_id: int, port: OrchestratorPort
) -> ForwardGate | None:
    """Decide whether a forward of ``request`` to ``stage_id`` may happen now.

    Orchestrator thread, before every ``on_finish`` forward and once when a stage fed by a
    ``stream`` edge opens. All impls are called: any ``defer=True`` defers the forward until
    ``port.release_forward(run_id, stage_id)``, which asks every gate again; the
    ``extra_sources`` of all results are appended to the bridge's sources; the transforms compose
    by ascending ``ForwardGate.order``, ties by plugin name.
    """


@hookspec
def omni_expand_abort(request_ids: list[str], port: OrchestratorPort) -> Iterable[str]:
    """Return more request ids to abort together with ``request_ids`` (e.g. companions).

    Orchestrator thread, on every abort (a caller's, a deadline's, ``port.abort``). The ids may
    name requests, children or companions, or nothing held any more. Results are merged.
    """
    return ()


@hookspec
def omni_background_tasks(port: OrchestratorPort) -> Iterable[Callable[[], Awaitable[None]]]:
    """Provide coroutine factories run as tasks on the orchestrator loop while it lives.

    Called once when the orchestrator starts, on its thread. Tasks are cancelled at shutdown. A
    task must wait on events or timers, never poll. An exception escaping a task is fatal to the
    engine (like a bug in the orchestrator): catch what you can handle. Results are merged.
    """
    return ()


@hookspec
def omni_shutdown(port: OrchestratorPort) -> Callable[[], Awaitable[None]] | None:
    """Provide a coroutine factory awaited when the orchestrator stops (before stages stop).

    Orchestrator thread, after the requests still held got their ``shutdown`` terminal. Every
    impl's factory is awaited in turn, each bounded by the shutdown timeout; one failing is logged.
    """


# --------------------------------------------------------------------------------------------
# Observers (orchestrator thread; called impl by impl, failures logged, results ignored)
# --------------------------------------------------------------------------------------------


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_request_admitted(
    run_id: str, request_id: str, request: RequestView, port: OrchestratorPort
) -> None:
    """A request (or companion / parallel-sampling child) was registered; not submitted yet."""


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_stage_submitted(
    run_id: str,
    request_id: str,
    request: RequestView,
    stage_id: int,
    replica: int,
    port: OrchestratorPort,
) -> None:
    """A request was submitted to a stage replica (initial submit or forward)."""


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_stage_output(
    run_id: str,
    request_id: str,
    request: RequestView,
    stage_id: int,
    output: StageOutput,
    port: OrchestratorPort,
) -> None:
    """A stage produced an output; it is recorded (``request.stages[stage_id].result`` holds it)
    and, for a final stage, emitted. Every token: keep it cheap; skipped when no plugin taking
    part implements it; implementing it makes every stage stream its deltas. An output carrying
    an error is observed too (before the request fails)."""


@hookspec(warn_on_impl_args=_RUN_ID)
def omni_request_terminal(
    run_id: str,
    request_id: str,
    request: RequestView,
    finish_reason: str,
    error: ErrorInfo | None,
    port: OrchestratorPort,
) -> None:
    """A request (or companion / child) reached its one terminal state; the orchestrator no
    longer holds it (``request`` still reads its final state).

    ``finish_reason`` is ``stop``/``length``/``abort``/``timeout``/``error``, or ``shutdown`` for
    requests still held when the orchestrator stops. Requests rejected before admission (duplicate
    id, no live replica, a plugin refusing them) never were admitted and do not fire it.
    """
