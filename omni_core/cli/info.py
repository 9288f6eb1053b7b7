"""``omni config validate|schema``, ``omni plugins list``, ``omni stages``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from omni_core.cli.validate import file_problems
from omni_core.errors import ConfigError

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    from omni_core.cli.app import fail

    config_app = typer.Typer(
        help="Pipeline configuration.", no_args_is_help=True, rich_markup_mode=None
    )
    plugins_app = typer.Typer(
        help="Installed plugins.", no_args_is_help=True, rich_markup_mode=None
    )
    app.add_typer(config_app, name="config")
    app.add_typer(plugins_app, name="plugins")
    console = Console()

    @config_app.command("validate")
    def validate(
        files: Annotated[list[Path], typer.Argument(help="Pipeline YAML files.")],
    ) -> None:
        """Check pipeline files against the installed plugins; one line per problem."""
        problems: list[str] = []
        first: ConfigError | None = None
        for file in files:
            try:  # every problem of the file, not only those of its first failing phase
                resolved, error = file_problems(file, state.host)
            except Exception as exc:
                raise fail(state, exc) from None
            if error is not None:
                problems.extend(error.problems)
                first = first or error
            if resolved is not None:
                ok = f"{file}: ok ({len(resolved.stages)} stages)"
                console.print(ok, markup=False, soft_wrap=True)
        if problems:
            error = ConfigError(problems)
            error.__cause__ = first  # --debug shows where the first problem was found
            raise fail(state, error)

    @config_app.command("schema")
    def schema() -> None:
        """Print the pipeline file's JSON Schema for the installed plugins (kinds, sections)."""
        from omni_core.config.schema import pipeline_schema

        try:
            text = json.dumps(pipeline_schema(state.host), indent=2)
        except Exception as exc:
            raise fail(state, exc) from None
        sys.stdout.write(text + "\n")

    @plugins_app.command("list")
    def plugins_list() -> None:
        """Registered plugins: name, distribution, version, hooks."""
        try:
            host = state.host
        except Exception as exc:
            raise fail(state, exc) from None
        table = Table("name", "distribution", "version", "hooks")
        for name, info in sorted(host.pm.plugin_info.items()):
            table.add_row(name, info.distribution, info.version, ", ".join(host.hooks_of(name)))
        for name in host.pm.disabled:
            table.add_row(name, "-", "-", "(disabled by OMNI_DISABLE_PLUGINS)")
        console.print(table)
        groups = host.cli_groups()
        if groups:
            console.print("CLI groups: " + ", ".join(f"{g.name} ({p})" for p, g in groups))

    @app.command("stages")
    def stages() -> None:
        """Registered stage kinds."""
        try:
            kinds = state.host.stage_kinds()
            providers = state.host.stage_kind_providers()
        except Exception as exc:
            raise fail(state, exc) from None
        table = Table("kind", "plugin", "output", "description")
        for name, kind in sorted(kinds.items()):
            table.add_row(name, providers[name], kind.output_mode, kind.description)
        console.print(table)
