"""Builds the ``omni`` app: core commands plus command groups that plugins register."""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Annotated

import typer
from pydantic import ValidationError

from omni_core.config.settings import OmniSettings
from omni_core.errors import ConfigError, OmniError, PluginError, RequestError
from omni_core.plugin.hooks import PluginHost

BAD_INPUT = 2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def report_error(exc: BaseException, debug: bool) -> int:
    """Print an error the way the CLI does; return the exit code."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
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
    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.settings = load_settings()
        self.log_level_chosen = False  # --debug, --log-level or OMNI_LOG_LEVEL given
        self._host: PluginHost | None = None

    @property
    def host(self) -> PluginHost:
        if self._host is None:
            self._host = PluginHost.create(self.settings)
        return self._host


def build_app(debug: bool = False) -> typer.Typer:
    state = CliState(debug)
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
    ) -> None:
        state.log_level_chosen = bool(
            debug_flag or level_name or "log_level" in state.settings.model_fields_set
        )
        level = "DEBUG" if debug_flag else (level_name or state.settings.log_level.upper())
        logging.basicConfig(
            level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )

    from omni_core.cli import bench, info, models, run, serve

    run.register(app, state)
    info.register(app, state)
    bench.register(app, state)
    models.register(app, state)
    serve.register(app, state)
    for _plugin, group in state.host.cli_groups():
        app.add_typer(group.app, name=group.name, help=group.help)
    return app


def fail(state: CliState, exc: BaseException) -> typer.Exit:
    return typer.Exit(report_error(exc, state.debug))
