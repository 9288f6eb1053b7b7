"""``omni models``: list and build the registered models (offline, deterministic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    models = typer.Typer(
        help="Models built locally (the core's demo models and the plugins').",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.add_typer(models, name="models")

    @models.command("list")
    def list_models() -> None:
        """Registered models: name, version, provider, built or not, description."""
        from omni_core.models import model_path

        console = Console()
        providers = state.host.model_providers()
        for name, spec in sorted(state.host.models().items()):
            where = model_path(name, state.settings.cache_dir, spec.version)
            built = (where / ".complete").exists()
            console.print(
                f"{name} {spec.version} [{providers[name]}] {'built' if built else 'not built'}"
                f" - {spec.description}",
                markup=False,
            )

    @models.command("build")
    def build(
        names: Annotated[list[str] | None, typer.Argument(help="Models (default: all).")] = None,
        check: Annotated[
            bool, typer.Option(help="Compare the files with the committed checksums.")
        ] = False,
    ) -> None:
        """Build models into $OMNI_CACHE_DIR/models (skips the ones already built)."""
        from omni_core.cli.app import fail
        from omni_core.errors import RequestError
        from omni_core.models import build_into, model_path, tree_hashes

        try:
            specs = state.host.models()
        except Exception as exc:
            raise fail(state, exc) from None
        unknown = [n for n in names or () if n not in specs]
        if unknown:
            raise fail(
                state, RequestError(f"unknown model(s) {unknown} (known: {', '.join(specs)})")
            )
        console = Console()
        bad = []
        for name in names or specs:
            spec = specs[name]
            try:
                path = build_into(spec, model_path(name, state.settings.cache_dir, spec.version))
            except Exception as exc:
                raise fail(state, exc) from None
            if not check:
                console.print(f"{name}: {path}", markup=False)
                continue
            if spec.checksums is None:
                verdict = "no committed checksums"
            else:
                same = tree_hashes(path) == dict(spec.checksums)
                verdict = "checksums ok" if same else "checksums DIFFER"
                bad += [] if same else [name]
            console.print(f"{name}: {path} ({verdict})", markup=False)
        if bad:
            raise typer.Exit(1)
