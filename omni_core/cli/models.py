"""``omni models build``: build the tiny demo models (offline, deterministic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    models = typer.Typer(help="Tiny demo models.", no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(models, name="models")

    @models.command("build")
    def build(
        names: Annotated[list[str] | None, typer.Argument(help="Models (default: all).")] = None,
        check: Annotated[
            bool, typer.Option(help="Compare the files with the committed checksums.")
        ] = False,
    ) -> None:
        """Build demo models into $OMNI_CACHE_DIR/models (skips the ones already built)."""
        from omni_core.cli.app import fail
        from omni_core.errors import RequestError
        from omni_core.models import MODELS, committed_checksums, ensure_model, tree_hashes

        unknown = [n for n in names or () if n not in MODELS]
        if unknown:
            raise fail(
                state,
                RequestError(f"unknown demo model(s) {unknown} (known: {', '.join(MODELS)})"),
            )
        console = Console()
        expected = committed_checksums()
        bad = []
        for name in names or MODELS:
            try:
                path = ensure_model(name, state.settings.cache_dir)
            except Exception as exc:
                raise fail(state, exc) from None
            same = tree_hashes(path) == expected.get(name)
            console.print(
                f"{name}: {path}" + (f" (checksums {'ok' if same else 'DIFFER'})" if check else ""),
                markup=False,
            )
            bad += [] if same or not check else [name]
        if bad:
            raise typer.Exit(1)
