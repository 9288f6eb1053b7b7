"""Builds plugin managers: built-in plugins, then entry points of ``omni_core.plugins``.

Nothing here runs at import time; every call of :func:`create_plugin_manager` makes a fresh one.

Hooks are called through pluggy's own hook callers, so ``wrapper=True`` / ``hookwrapper=True``
impls and pluggy's tracing apply to every hook. Two things pluggy does not do are added where an
impl registers, by wrapping its function (``impl.function.__wrapped__`` is the plugin's own):

* observer impls (:data:`OBSERVERS`) are *isolated*: an exception is logged naming the plugin and
  the call goes on to the next impl (pluggy's loop would stop at the first exception);
* every other impl is *attributed*: an exception leaving it carries the plugin's name
  (:func:`plugin_of`), and :func:`collecting` tells which plugin returned which result (used to
  name both providers of a conflict, or the plugin whose result has the wrong type).

Wrappers are never wrapped: they see the impls' results and exceptions as pluggy gives them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import inspect
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from omni_core import hookspecs
from omni_core.config.settings import OmniSettings
from omni_core.errors import PluginLoadError
from omni_core.plugin import (
    ENTRY_POINT_GROUP,
    PLUGIN_API_VERSION,
    PROJECT_NAME,
    SUPPORTED_API_VERSIONS,
)

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost

logger = logging.getLogger(__name__)

# Observer hooks: called impl by impl, a failing impl is logged and the others still run.
OBSERVERS = (
    "omni_request_admitted",
    "omni_stage_submitted",
    "omni_stage_output",
    "omni_request_terminal",
)
_PLUGIN_ATTR = "omni_plugin"  # set on an exception leaving an attributed impl
_COLLECTED: ContextVar[list[tuple[str, object]] | None] = ContextVar("omni_collected", default=None)

# Built-in plugins: (name, module). Registered exactly like third-party ones.
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (("builtin", "omni_core.plugin.builtin"),)
# registered only where settings.testing_kit is on (OMNI_TESTING_KIT=1: the testing kit's pytest
# plugin sets it), never in a production manager
TESTING_PLUGIN = ("testing", "omni_core.testing.plugin")


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered plugin came from (shown by ``omni plugins list``)."""

    name: str
    distribution: str
    version: str
    module: str
    builtin: bool


class OmniPluginManager(pluggy.PluginManager):
    """A pluggy manager that only looks at ``omni_``-prefixed attributes and records origins."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.plugin_info: dict[str, PluginInfo] = {}
        self.origins: dict[str, str] = {}  # plugin name -> where it came from, for errors
        self.disabled: list[str] = []
        # Per-pipeline plugin objects (``omni_pipeline_plugin``): registered name -> object.
        # Each takes part only in the hooks of the host that registered it; every host of this
        # manager is rescoped when one is registered or unregistered.
        self.pipeline_objects: dict[str, object] = {}
        self.hosts: weakref.WeakSet[PluginHost] = weakref.WeakSet()
        self.scope_lock = threading.RLock()

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if not name.startswith("omni_"):
            return None
        return super().parse_hookimpl_opts(plugin, name)

    def register(
        self, plugin: Any, name: str | None = None, *, label: str | None = None
    ) -> str | None:
        """pluggy's ``register``, then the plugin's impls wrapped (isolated or attributed).

        ``label``: the plugin name errors and results are attributed to (default: ``name``; a
        per-pipeline object is attributed to the plugin that made it).
        """
        plugin_name = super().register(plugin, name)
        if plugin_name is None:
            return None
        for caller in self.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin or impl.wrapper or impl.hookwrapper:
                    continue
                guard = _isolated if caller.name in OBSERVERS else _attributed
                impl.function = guard(impl.function, label or plugin_name, caller.name)  # type: ignore[misc]
        return plugin_name

    def global_plugins(self) -> list[tuple[str, Any]]:
        """``(name, plugin)`` of every registered plugin but the per-pipeline objects."""
        return [
            (name, plugin)
            for name, plugin in self.list_name_plugin()
            if plugin is not None and name not in self.pipeline_objects
        ]

    def enable_trace(self, write: Callable[[str], object] | None = None) -> Callable[[], None]:
        """pluggy's hook-call trace written to ``write`` (default: the current ``sys.stderr``).

        Returns the function that turns it off again.
        """
        self.trace.root.setwriter(write or (lambda text: sys.stderr.write(text)))
        undo = self.enable_tracing()

        def off() -> None:
            undo()
            self.trace.root.setwriter(None)

        return off


def _isolated(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def observe(*args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except Exception:
            logger.exception("plugin %r failed in %s", plugin, hook)

    return observe


def _attributed(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            if getattr(exc, _PLUGIN_ATTR, None) is None:  # the innermost plugin keeps it
                try:
                    setattr(exc, _PLUGIN_ATTR, plugin)
                    exc.add_note(f"(raised by plugin '{plugin}' in {hook})")
                except (AttributeError, TypeError):  # pragma: no cover - exotic exceptions
                    pass
            raise
        collected = _COLLECTED.get()
        if collected is not None:
            collected.append((plugin, result))
        return result

    return call


def plugin_of(exc: BaseException) -> str | None:
    """The plugin whose hook impl raised ``exc`` (None: not raised by an impl, or by a wrapper)."""
    return getattr(exc, _PLUGIN_ATTR, None)


@contextmanager
def collecting() -> Iterator[Callable[[object], str | None]]:
    """Within the block, hook calls record which plugin returned which result object.

    Yields ``owner(result)``: the plugin that returned that very object (a hook caller's result
    list holds the impls' results as they returned them), or None for a result a wrapper made.
    """
    collected: list[tuple[str, object]] = []
    token = _COLLECTED.set(collected)
    try:
        yield lambda result: next((p for p, r in collected if r is result), None)
    finally:
        _COLLECTED.reset(token)


def _iter_entry_points() -> Iterable[md.EntryPoint]:
    """The installed entry points of our group (the testing kit fakes this)."""
    return md.entry_points(group=ENTRY_POINT_GROUP)


# What each plugin API version changed, in one line: the load error of a plugin written for an
# older version names every change since, and the migration section of docs/plugins.md.
API_CHANGES: dict[int, str] = {
    2: "request-lifecycle hooks receive a read-only request view and a port (omni_core.views) "
    "instead of the orchestrator, and a plugin's per-request hooks take part only in the "
    "pipelines that use it (requires_plugins, its sections/kinds/bridges, omni_applies_to)",
    3: "a plugin object per pipeline (omni_pipeline_plugin) holds a plugin's state; hooks take "
    "run_id (request_id is its deprecated alias) and omni_admit_request's pipeline is a "
    "PipelineView; omni_stage_output fires after the output is recorded",
}
DOCS = "docs/plugins.md"


def _check_api_version(module: Any, where: str) -> None:
    declared = getattr(module, "OMNI_PLUGIN_API_VERSION", None)
    if declared is None:
        raise PluginLoadError(
            f"{where} does not declare OMNI_PLUGIN_API_VERSION (omni-core plugin API version is "
            f"{PLUGIN_API_VERSION}; see {DOCS}#rules-of-the-plugin-api)"
        )
    if type(declared) is int and declared in SUPPORTED_API_VERSIONS:
        if declared < 3 and "pipeline" in _arg_names(getattr(module, "omni_admit_request", None)):
            # the one change a v2 impl cannot survive unchanged: its ``pipeline`` argument was a
            # PipelineConfig (``pipeline.stages`` a list of StageConfig); API 3 passes the
            # PipelineView (``pipeline.config`` is that config) — fail loudly, not mid-request.
            # An impl that does not take ``pipeline`` sees nothing that changed: it loads.
            raise PluginLoadError(
                f"{where} declares plugin API version {declared} and its omni_admit_request "
                "takes pipeline, which is a PipelineView since API 3 "
                "(the v2 PipelineConfig is pipeline.config). Migrate the plugin: "
                f"{DOCS}#migrating-from-api-2-to-api-3"
            )
        if declared < PLUGIN_API_VERSION:
            logger.info(
                "%s declares plugin API version %d: loaded unchanged (deprecated; see %s#%s)",
                where,
                declared,
                DOCS,
                f"migrating-from-api-{declared}-to-api-{PLUGIN_API_VERSION}",
            )
        return
    message = (
        f"{where} declares plugin API version {declared!r}, but this omni-core provides "
        f"version {PLUGIN_API_VERSION}"
    )
    if isinstance(declared, int) and not isinstance(declared, bool):
        if declared < PLUGIN_API_VERSION:
            since = range(declared + 1, PLUGIN_API_VERSION + 1)
            changes = [API_CHANGES[v] for v in since if v in API_CHANGES]
            # the oldest section the plugin needs: API 2 still loads, so migrate to it first
            anchor = f"migrating-from-api-{declared}-to-api-{declared + 1}"
            message += (
                f". Changed since {declared}: {'; '.join(changes)}. Migrate the plugin: "
                f"{DOCS}#{anchor}"
            )
        else:
            message += " (the plugin needs a newer omni-core)"
    raise PluginLoadError(message)


def _arg_names(impl: Any) -> frozenset[str]:
    """The argument names a hook impl takes, as pluggy passes them (by name); none for a
    non-callable (or one without a signature)."""
    if not callable(impl):
        return frozenset()
    try:
        return frozenset(inspect.signature(impl).parameters)
    except (TypeError, ValueError):
        return frozenset()


def _register(pm: OmniPluginManager, plugin: Any, name: str, where: str) -> None:
    """Register one plugin. Its impls of hooks nobody declared yet are checked later, by
    :func:`check_pending` (another plugin may add those hookspecs when it registers)."""
    _check_api_version(plugin, where)
    if pm.get_plugin(name) is not None:
        raise PluginLoadError(f"{where}: the name '{name}' is already registered")
    try:
        pm.register(plugin, name=name)
    except (pluggy.PluginValidationError, ValueError) as exc:
        if pm.is_registered(plugin):
            pm.unregister(plugin)
        raise PluginLoadError(f"{where} is invalid: {exc}") from exc
    pm.origins[name] = where


def check_pending(pm: OmniPluginManager) -> None:
    """pluggy's ``check_pending`` once every plugin is registered: an impl of a hook that no
    plugin declares fails, naming the plugin, unless it is marked ``optionalhook=True``."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) or repr(exc.plugin)
        where = pm.origins.get(name, f"plugin '{name}'")
        unknown = sorted(
            caller.name
            for caller in pm.get_hookcallers(exc.plugin) or ()
            if not caller.has_spec()
            and any(i.plugin is exc.plugin and not i.optionalhook for i in caller.get_hookimpls())
        )
        raise PluginLoadError(
            f"{where} implements {', '.join(map(repr, unknown))}, a hook no loaded plugin "
            "declares (misspelled, or the plugin adding it is not installed or disabled; "
            "mark an impl of another plugin's hook @hookimpl(optionalhook=True) if that plugin "
            "is optional)"
        ) from exc


def create_plugin_manager(
    settings: OmniSettings,
    *,
    builtins: Sequence[tuple[str, str]] = BUILTIN_PLUGINS,
    load_entry_points: bool = True,
    extra_plugins: Sequence[tuple[str, Any]] = (),
) -> OmniPluginManager:
    """A fresh plugin manager with built-ins, installed entry points and ``extra_plugins``.

    Plugins named in ``settings.disable_plugins`` (``OMNI_DISABLE_PLUGINS``) are blocked before
    they are imported. A plugin that fails to import or register raises
    :class:`~omni_core.errors.PluginLoadError` naming the entry point, distribution and version.
    Impls of hooks no plugin declares are checked once, after every plugin registered, so the
    order of entry points does not matter. ``settings.trace_hooks`` (``OMNI_TRACE_HOOKS=1``)
    writes pluggy's trace of every hook call to stderr. ``settings.testing_kit`` adds the testing
    kit's plugin (:data:`TESTING_PLUGIN`) to the built-ins.
    """
    pm = OmniPluginManager()
    if settings.trace_hooks:
        pm.enable_trace()
    # historic: every plugin registered below gets omni_addhooks as it registers
    pm.hook.omni_addhooks.call_historic(kwargs={"plugin_manager": pm})
    for name in settings.disable_plugins:
        pm.set_blocked(name)
        pm.disabled.append(name)

    if settings.testing_kit and TESTING_PLUGIN not in builtins:
        builtins = (*builtins, TESTING_PLUGIN)
    for name, module_name in builtins:
        if pm.is_blocked(name):
            continue
        module = importlib.import_module(module_name)
        _register(pm, module, name, f"built-in plugin '{name}' ({module_name})")
        pm.plugin_info[name] = PluginInfo(name, "omni-core", _own_version(), module_name, True)

    if load_entry_points:
        for ep in _iter_entry_points():
            _load_entry_point(pm, ep)

    for name, plugin in extra_plugins:
        if not pm.is_blocked(name):
            _register(pm, plugin, name, f"plugin '{name}'")
            where = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
            pm.plugin_info[name] = PluginInfo(name, "<local>", "", where, False)
    check_pending(pm)
    return pm


def _load_entry_point(pm: OmniPluginManager, ep: md.EntryPoint) -> None:
    if pm.is_blocked(ep.name):
        logger.info("plugin %r disabled by OMNI_DISABLE_PLUGINS", ep.name)
        return
    dist = getattr(ep, "dist", None)
    dist_name = dist.name if dist is not None else "<unknown distribution>"
    version = dist.version if dist is not None else "?"
    where = f"plugin '{ep.name}' (entry point '{ep.value}' from {dist_name} {version})"
    if pm.get_plugin(ep.name) is not None:
        raise PluginLoadError(f"{where}: the name '{ep.name}' is already registered")
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PluginLoadError(f"{where} failed to import: {type(exc).__name__}: {exc}") from exc
    _register(pm, plugin, ep.name, where)
    pm.plugin_info[ep.name] = PluginInfo(ep.name, dist_name, version, ep.value, False)


def _own_version() -> str:
    try:
        return md.version("omni-core")
    except md.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"
