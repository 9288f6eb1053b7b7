"""``omni pipelines``: the registered pipelines (``list``, the default) and ``show NAME``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    from omni_core.cli.app import fail

    pipelines = typer.Typer(
        help="Registered (named) pipelines: list them (the default), show one's config.",
        invoke_without_command=True,
        rich_markup_mode=None,
    )
    app.add_typer(pipelines, name="pipelines")

    def list_pipelines() -> None:
        try:
            named = state.host.pipelines()
        except Exception as exc:
            raise fail(state, exc) from None
        table = Table("pipeline", "description")
        for name, spec in sorted(named.items()):
            table.add_row(name, spec.description)
        Console().print(table)

    @pipelines.callback()
    def _default(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            list_pipelines()

    @pipelines.command("list")
    def list_command() -> None:
        """Registered pipelines: name and description."""
        list_pipelines()

    @pipelines.command("show")
    def show(
        name: Annotated[str, typer.Argument(help="A registered pipeline's name.")],
    ) -> None:
        """The pipeline's resolved config as YAML (every field; no machine paths: a copy runs
        elsewhere as a pipeline file)."""
        import yaml

        try:
            config = state.host.pipeline_config(name)
        except Exception as exc:
            raise fail(state, exc) from None
        typer.echo(yaml.safe_dump(config.portable(), sort_keys=False), nl=False)
