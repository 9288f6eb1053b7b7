"""Builds the ``omni`` app: core commands plus command groups that plugins register."""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Annotated

import typer

from omni_core.config.settings import OmniSettings
from omni_core.errors import ConfigError, OmniError, PluginError, RequestError
from omni_core.plugin.hooks import PluginHost

BAD_INPUT = 2


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


class CliState:
    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.settings = OmniSettings()
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
        log_level: Annotated[
            str | None, typer.Option("--log-level", help="Log level (default OMNI_LOG_LEVEL).")
        ] = None,
    ) -> None:
        level = "DEBUG" if debug_flag else (log_level or state.settings.log_level)
        logging.basicConfig(
            level=level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
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
