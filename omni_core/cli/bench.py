"""``omni bench``: benchmarks and stress runs shipped in :mod:`omni_core.bench`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    bench = typer.Typer(
        help="Benchmarks and stress runs.", no_args_is_help=True, rich_markup_mode=None
    )
    app.add_typer(bench, name="bench")

    @bench.command("chaos")
    def chaos(
        requests: Annotated[int, typer.Option(help="Requests to push through.")] = 10_000,
        concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = 256,
        seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    ) -> None:
        """Random aborts, request failures and replica deaths; exits 1 on any violation."""
        from omni_core.bench.chaos import main

        if not state.debug:  # replica deaths and restarts are expected here
            logging.getLogger("omni_core").setLevel(logging.ERROR)
        raise typer.Exit(main(requests, concurrency, seed))
