"""``PluginHost``: the typed facade over the plugin manager. The only caller of ``pm.hook``.

Every hook is called through pluggy's hook caller (``pm.hook.NAME(...)``): wrappers,
``hookwrapper``s and pluggy's tracing see every call. Observer isolation and the names of the
plugins behind results and errors come from :mod:`omni_core.plugin.manager`'s impl guards.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from omni_core.errors import PluginConflictError, PluginError, RequestRejected
from omni_core.plugin.manager import OBSERVERS, collecting, plugin_of
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

if TYPE_CHECKING:
    from pluggy import HookCaller

    from omni_core.config.pipeline import PipelineConfig
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.config.settings import OmniSettings
    from omni_core.outputs import ErrorInfo, StageOutput
    from omni_core.plugin.manager import OmniPluginManager
    from omni_core.views import OrchestratorPort, RequestView

T = TypeVar("T")
logger = logging.getLogger(__name__)
__all__ = ["OBSERVERS", "PluginHost"]


class PluginHost:
    """Calls hooks with types; caches registrations; reports conflicts naming both providers.

    Query methods (what a plugin's tests read; registrations are collected on first use, then
    cached): :meth:`stage_kinds` / :meth:`stage_kind_providers`, :meth:`bridges`,
    :meth:`pipelines`, :meth:`models` / :meth:`model_providers`, :meth:`engine_kinds`,
    :meth:`config_sections`, :meth:`cli_groups`, :meth:`server_routes`, :meth:`run_options`,
    :meth:`benchmarks`, :meth:`registered` (any registration hook, with its providers),
    :meth:`results_by_plugin` (any hook, a plugin's own included), :meth:`hooks_of` (a plugin's
    hooks) and :meth:`pipeline_objects` (an engine host's per-pipeline objects).
    ``pm.plugin_info[name]`` says where a plugin came from (distribution, version, module);
    ``active`` (on an engine's host) which plugins take part in its pipeline, and why.
    """

    def __init__(self, pm: OmniPluginManager, settings: OmniSettings) -> None:
        self.pm = pm
        self.settings = settings
        self._registry: dict[str, dict[str, tuple[str, Any]]] = {}
        # Set on a pipeline's host (:meth:`for_pipeline`): plugin name -> why it takes part, and
        # the subset hook callers of the per-pipeline hooks. None / empty: every plugin.
        self.active: dict[str, str] | None = None
        self._callers: dict[str, HookCaller] = {}
        # This host's per-pipeline plugin objects (omni_pipeline_plugin): (registered name, object)
        self._own: list[tuple[str, object]] = []
        pm.hosts.add(self)
        self._rescope()

    def register(self, plugin: Any, name: str) -> None:
        """Register a plugin object after start-up (e.g. the server's metrics); before an engine
        is built with this host."""
        from omni_core.plugin.manager import _register, check_pending

        if self.active is not None:
            raise PluginError(
                f"plugin '{name}': register plugins on the engine's host before the engine starts, "
                "not on a pipeline's host"
            )
        with self.pm.scope_lock:
            _register(self.pm, plugin, name, f"plugin '{name}'")
            check_pending(self.pm)
            self._registry.clear()
            self._rescope()

    def _refresh(self) -> None:
        hook = self._hook
        # Hot-path hooks: checked once whether anyone (taking part) implements them.
        self.has_output_observers = bool(hook("omni_stage_output").get_hookimpls())
        self.has_output_interceptors = bool(hook("omni_intercept_stage_output").get_hookimpls())
        self.has_forward_gates = bool(hook("omni_forward_gate").get_hookimpls())
        self.has_admission = bool(hook("omni_admit_request").get_hookimpls())
        # Observers fire on every request (and every output): their hook callers, or None when
        # no plugin implements the hook (then a notification costs one attribute test).
        self._on_admitted = self._implemented("omni_request_admitted")
        self._on_submitted = self._implemented("omni_stage_submitted")
        self._on_output = self._implemented("omni_stage_output")
        self._on_terminal = self._implemented("omni_request_terminal")

    def _rescope(self) -> None:
        """(Re)build the per-pipeline hook callers: the plugins taking part (all, on an engine's
        root host) and this host's own per-pipeline objects, never another host's."""
        from omni_core.plugin.scope import PER_PIPELINE_HOOKS

        pm = self.pm
        own = {id(obj) for _, obj in self._own}
        removed = [obj for obj in pm.pipeline_objects.values() if id(obj) not in own]
        if self.active is not None:
            removed += [p for n, p in pm.global_plugins() if n not in self.active]
        if removed or self.active is not None:
            self._callers = {
                name: pm.subset_hook_caller(name, removed) for name in PER_PIPELINE_HOOKS
            }
        else:
            self._callers = {}
        self._refresh()

    def _implemented(self, hook_name: str) -> HookCaller | None:
        caller = self._hook(hook_name)
        return caller if caller.get_hookimpls() else None

    def _hook(self, hook_name: str) -> HookCaller:
        """pluggy's hook caller: this pipeline's subset caller for a per-pipeline hook."""
        caller = self._callers.get(hook_name)
        if caller is None:
            caller = getattr(self.pm.hook, hook_name)
        return caller

    def for_pipeline(self, pipeline: ResolvedPipeline) -> PluginHost:
        """The host an engine's orchestrator uses: the same registrations, and per-pipeline hooks
        (:data:`~omni_core.plugin.scope.PER_PIPELINE_HOOKS`) that call only the plugins taking
        part in ``pipeline`` (:func:`~omni_core.plugin.scope.active_plugins`), through pluggy's
        ``subset_hook_caller``. Computed once, when the engine starts."""
        from omni_core.plugin.scope import active_plugins

        active = active_plugins(self, pipeline)
        scoped = copy.copy(self)  # shares the manager, settings and registry cache
        scoped.active = active
        scoped._own = []
        with self.pm.scope_lock:
            self.pm.hosts.add(scoped)
            scoped._rescope()
        logger.debug(
            "pipeline '%s': plugins taking part: %s", pipeline.config.name, active or "none"
        )
        return scoped

    # --- per-pipeline plugin objects ------------------------------------------------------------
    def open_pipeline(self, port: OrchestratorPort) -> None:
        """Register the objects the plugins taking part return from ``omni_pipeline_plugin``
        (once, when the engine's orchestrator is built, on its thread): their hook methods take
        part in this host's hooks only. Raises PluginError naming the plugin when an object
        implements a hook other than the per-pipeline ones."""
        from omni_core.plugin.scope import PER_PIPELINE_HOOKS, PIPELINE_PLUGIN

        if not self._hook(PIPELINE_PLUGIN).get_hookimpls():
            return  # nobody taking part makes one (the common case)
        if self._own:
            raise PluginError("this host's per-pipeline plugin objects were already made")
        pipeline = port.pipeline
        pm = self.pm
        label = getattr(getattr(pipeline, "config", None), "name", "?")
        made = self.results_by_plugin(PIPELINE_PLUGIN, pipeline=pipeline, port=port)
        allowed = set(PER_PIPELINE_HOOKS) - {PIPELINE_PLUGIN}
        with pm.scope_lock:
            try:
                for plugin, obj in made:
                    wrong = sorted(
                        name
                        for name in dir(obj)
                        if name.startswith("omni_")
                        and pm.parse_hookimpl_opts(obj, name) is not None
                        and name not in allowed
                    )
                    if wrong:
                        raise PluginError(
                            f"plugin '{plugin}': the object its {PIPELINE_PLUGIN} returned for "
                            f"pipeline '{label}' implements {', '.join(wrong)}: a per-pipeline "
                            f"object implements only {', '.join(sorted(allowed))}"
                        )
                    name = f"{plugin}@{label}#{id(obj):x}"
                    try:
                        pm.register(obj, name, label=plugin)
                    except Exception as exc:
                        raise PluginError(
                            f"plugin '{plugin}': the object its {PIPELINE_PLUGIN} returned for "
                            f"pipeline '{label}' is invalid: {exc}"
                        ) from exc
                    pm.pipeline_objects[name] = obj
                    self._own.append((name, obj))
            except BaseException:
                self._drop_own()
                raise
            self._rescope_all()

    def close_pipeline(self) -> None:
        """Unregister this host's per-pipeline objects (when its engine shut down)."""
        with self.pm.scope_lock:
            if self._own:
                try:
                    self._drop_own()
                finally:
                    self._rescope_all()

    def pipeline_objects(self) -> dict[str, object]:
        """This host's per-pipeline plugin objects by the plugin that made them."""
        return {name.partition("@")[0]: obj for name, obj in self._own}

    def _drop_own(self) -> None:
        for name, _ in self._own:
            self.pm.pipeline_objects.pop(name, None)
            if self.pm.get_plugin(name) is not None:
                self.pm.unregister(name=name)
        self._own = []

    def _rescope_all(self) -> None:
        for host in list(self.pm.hosts):
            host._rescope()

    @classmethod
    def create(cls, settings: OmniSettings, **kwargs: Any) -> PluginHost:
        """A host over a fresh plugin manager (:func:`create_plugin_manager`'s ``kwargs``) with
        ``settings``. Built once, where a program starts (the engine factory, the CLI, the
        server, bench, the testing kit); everything else gets this host passed down."""
        from omni_core.plugin.manager import create_plugin_manager

        return cls(create_plugin_manager(settings, **kwargs), settings)

    # --- generic calling ----------------------------------------------------------------------
    def results_by_plugin(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a hook through pluggy (wrappers apply): ``(plugin name, result)`` in pluggy's
        order, one pair per impl that returned something other than None (not for
        ``firstresult`` hooks).

        For hooks plugins add themselves (e.g. a plugin's own ``omni_<plugin>_register_*``). A
        result that a wrapper put in place of an impl's is attributed to ``"<hook wrapper>"``.
        An exception raised by an impl propagates with the plugin's name in its notes.
        """
        with collecting() as owner:
            results = self._hook(hook_name)(**kwargs)
            return [(owner(result) or "<hook wrapper>", result) for result in results]

    def registered(self, hook_name: str, expected: type[T]) -> dict[str, tuple[str, T]]:
        """A registration hook's items by name: ``name -> (plugin, item)`` (cached; raises on a
        wrong type or a name provided twice)."""
        return self._registered(hook_name, expected)

    def _registered(self, hook_name: str, expected: type[T]) -> dict[str, tuple[str, T]]:
        if hook_name in self._registry:
            return self._registry[hook_name]
        found: dict[str, tuple[str, T]] = {}
        for plugin, items in self.results_by_plugin(hook_name):
            for item in items or ():
                if not isinstance(item, expected):
                    raise PluginError(
                        f"plugin '{plugin}': {hook_name} returned {type(item).__name__}, "
                        f"expected {expected.__name__}"
                    )
                name = item.name  # type: ignore[attr-defined]
                if name in found:
                    raise PluginConflictError(
                        f"{expected.__name__} '{name}' is provided by two plugins: "
                        f"'{found[name][0]}' and '{plugin}'"
                    )
                found[name] = (plugin, item)
        self._registry[hook_name] = found
        return found

    # --- registrations --------------------------------------------------------------------------
    def stage_kinds(self) -> dict[str, StageKind]:
        """Registered stage kinds by name (``omni_register_stage_kinds``, every plugin)."""
        return {
            k: v for k, (_, v) in self._registered("omni_register_stage_kinds", StageKind).items()
        }

    def stage_kind_providers(self) -> dict[str, str]:
        """Stage kind name -> the plugin that registered it."""
        return {
            k: p for k, (p, _) in self._registered("omni_register_stage_kinds", StageKind).items()
        }

    def bridges(self) -> dict[str, Bridge]:
        """Registered bridges by name (``omni_register_bridges``)."""
        return {k: v for k, (_, v) in self._registered("omni_register_bridges", Bridge).items()}

    def pipelines(self) -> dict[str, PipelineSpec]:
        """Registered named pipelines (``omni run NAME``) by name."""
        return {
            k: v for k, (_, v) in self._registered("omni_register_pipelines", PipelineSpec).items()
        }

    def pipeline_config(self, name: str) -> PipelineConfig:
        """A fresh config of registered pipeline ``name``, its factory given this host (what a
        factory deriving from another plugin's pipeline calls; ConfigError if unknown)."""
        from omni_core.plugin.pipelines import registered_config

        return registered_config(self, name)

    def models(self) -> dict[str, ModelSpec]:
        """Registered local models (``omni models build NAME``) by name."""
        return {k: v for k, (_, v) in self._registered("omni_register_models", ModelSpec).items()}

    def model_providers(self) -> dict[str, str]:
        """Model name -> the plugin that registered it."""
        return {k: p for k, (p, _) in self._registered("omni_register_models", ModelSpec).items()}

    def engine_kinds(self) -> dict[str, EngineKind]:
        """Registered engine kinds (a pipeline's ``engine:``) by name."""
        return {
            k: v for k, (_, v) in self._registered("omni_register_engine_kinds", EngineKind).items()
        }

    def config_sections(self) -> dict[str, ConfigSection]:
        """Registered top-level pipeline sections by key."""
        return {
            k: v
            for k, (_, v) in self._registered(
                "omni_register_config_sections", ConfigSection
            ).items()
        }

    def cli_groups(self) -> list[tuple[str, CliGroup]]:
        """``(plugin, group)`` of every CLI group mounted as ``omni NAME``."""
        return [
            (p, g) for _, (p, g) in self._registered("omni_register_cli_groups", CliGroup).items()
        ]

    def server_routes(self) -> list[ServerRoute]:
        """Routes ``omni serve`` mounts."""
        return [
            r for _, (_, r) in self._registered("omni_register_server_routes", ServerRoute).items()
        ]

    def run_options(self) -> dict[str, tuple[str, RunOption]]:
        """``omni run``'s plugin flags: name (without ``--``) -> (plugin, option)."""
        return self._registered("omni_register_run_options", RunOption)

    def benchmarks(self) -> dict[str, Benchmark]:
        """Registered benchmarks (``omni bench NAME``) by name."""
        return {
            k: v for k, (_, v) in self._registered("omni_register_benchmarks", Benchmark).items()
        }

    def hooks_of(self, plugin_name: str) -> list[str]:
        """The hooks plugin ``plugin_name`` implements, sorted ([] for an unknown name); a
        per-pipeline object's hooks are not the module's."""
        plugin = self.pm.get_plugin(plugin_name)
        if plugin is None:
            return []
        return sorted(c.name for c in self.pm.get_hookcallers(plugin) or ())

    # --- lifecycle decisions (orchestrator thread) -------------------------------------------
    def admit_request(self, **kwargs: Any) -> list[Admission]:
        """All impls' admissions. A :class:`RequestRejected` propagates as it is; anything else
        raised becomes a PluginError naming the plugin that failed.

        Takes the hook's arguments; ``run_id`` and its deprecated name ``request_id`` are both
        passed (either given), and ``pipeline`` is always ``port.pipeline`` (a PipelineView)."""
        run_id = kwargs.get("run_id", kwargs.get("request_id"))
        kwargs["run_id"] = kwargs["request_id"] = run_id
        port = kwargs.get("port")
        if port is not None:
            kwargs["pipeline"] = port.pipeline
        try:
            pairs = list(self.results_by_plugin("omni_admit_request", **kwargs))
        except RequestRejected:
            raise
        except Exception as exc:
            who = f"plugin '{plugin_of(exc)}'" if plugin_of(exc) else "a hook wrapper"
            raise PluginError(f"{who} rejected the request: {type(exc).__name__}: {exc}") from exc
        for plugin, admission in pairs:
            if not isinstance(admission, Admission):
                raise PluginError(
                    f"plugin '{plugin}': omni_admit_request returned "
                    f"{type(admission).__name__}, expected Admission"
                )
        return [admission for _, admission in pairs]

    def intercept_stage_output(
        self,
        request_id: str,
        request: RequestView,
        stage_id: int,
        output: StageOutput,
        port: OrchestratorPort,
    ) -> bool:
        """``omni_intercept_stage_output``: True when a plugin consumed the output."""
        return bool(
            self._hook("omni_intercept_stage_output")(
                run_id=request_id,
                request_id=request_id,
                request=request,
                stage_id=stage_id,
                output=output,
                port=port,
            )
        )

    def forward_gates(
        self, request_id: str, request: RequestView, stage_id: int, port: OrchestratorPort
    ) -> list[tuple[str, ForwardGate]]:
        """``(plugin name, gate)`` of every impl that returned one, in pluggy's call order."""
        return self.results_by_plugin(
            "omni_forward_gate",
            run_id=request_id,
            request_id=request_id,
            request=request,
            stage_id=stage_id,
            port=port,
        )

    def expand_abort(self, request_ids: list[str], port: OrchestratorPort) -> list[str]:
        """``omni_expand_abort``: the extra ids to abort, every impl's merged."""
        extra: list[str] = []
        for ids in self._hook("omni_expand_abort")(request_ids=request_ids, port=port):
            extra.extend(ids or ())
        return extra

    def background_tasks(self, port: OrchestratorPort) -> list[Callable[[], Awaitable[None]]]:
        """``omni_background_tasks``: every impl's coroutine factories."""
        tasks: list[Callable[[], Awaitable[None]]] = []
        for factories in self._hook("omni_background_tasks")(port=port):
            tasks.extend(factories or ())
        return tasks

    def shutdown_extensions(self, port: OrchestratorPort) -> list[Callable[[], Awaitable[None]]]:
        """``omni_shutdown``: every impl's factory (None left out)."""
        shutdown = self._hook("omni_shutdown")
        return [f for f in shutdown(port=port) if f is not None]

    # --- observers --------------------------------------------------------------------------------
    # Each is a no-op (no call, no kwargs) when no plugin implements the hook; otherwise one
    # pluggy call, in which a failing impl is logged and the next one still runs.
    def request_admitted(
        self, request_id: str, request: RequestView, port: OrchestratorPort
    ) -> None:
        """``omni_request_admitted`` (observer; no call at all when no plugin implements it)."""
        if self._on_admitted is not None:
            self._on_admitted(run_id=request_id, request_id=request_id, request=request, port=port)

    def stage_submitted(
        self,
        request_id: str,
        request: RequestView,
        stage_id: int,
        replica: int,
        port: OrchestratorPort,
    ) -> None:
        """``omni_stage_submitted`` (observer; no call at all when no plugin implements it)."""
        if self._on_submitted is not None:
            self._on_submitted(
                run_id=request_id,
                request_id=request_id,
                request=request,
                stage_id=stage_id,
                replica=replica,
                port=port,
            )

    def stage_output(
        self,
        request_id: str,
        request: RequestView,
        stage_id: int,
        output: StageOutput,
        port: OrchestratorPort,
    ) -> None:
        """``omni_stage_output`` (observer; no call at all when no plugin implements it)."""
        if self._on_output is not None:
            self._on_output(
                run_id=request_id,
                request_id=request_id,
                request=request,
                stage_id=stage_id,
                output=output,
                port=port,
            )

    def request_terminal(
        self,
        request_id: str,
        request: RequestView,
        finish_reason: str,
        error: ErrorInfo | None,
        port: OrchestratorPort,
    ) -> None:
        """``omni_request_terminal`` (observer; no call at all when no plugin implements it)."""
        if self._on_terminal is not None:
            self._on_terminal(
                run_id=request_id,
                request_id=request_id,
                request=request,
                finish_reason=finish_reason,
                error=error,
                port=port,
            )
