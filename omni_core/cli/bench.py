"""``omni bench [NAME...] [--quick]``: benchmarks with same-run baselines, and the chaos run."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from omni_core.cli.app import CliState

ALL = ("hop", "throughput", "idle", "scaling", "chaos", "vllm", "pipeline", "plugins", "serve")
DEFAULT = ("hop", "throughput", "idle", "scaling", "chaos")
# Plugins add more through ``omni_register_benchmarks``; those run only when named (like vllm and
# serve: vLLM's own ``bench serve`` client against omni serve and vLLM's server).


def register(app: typer.Typer, state: CliState) -> None:
    @app.command("bench")
    def bench(
        names: Annotated[
            list[str] | None,
            typer.Argument(
                help=f"Benchmarks to run: {', '.join(ALL)}, and those plugins register."
            ),
        ] = None,
        quick: Annotated[
            bool,
            typer.Option(
                help="A smoke test: smaller workloads, one round (seconds each for hop, "
                "throughput, idle, scaling, chaos; a few minutes for benchmarks starting engines: "
                "vllm, pipeline, serve, a plugin's); figures not comparable with a full run's."
            ),
        ] = False,
        requests: Annotated[int, typer.Option(help="chaos: requests to push.")] = 10_000,
        concurrency: Annotated[int, typer.Option(help="chaos: requests in flight.")] = 256,
        seed: Annotated[int, typer.Option(help="chaos: random seed.")] = 0,
    ) -> None:
        """Run benchmarks; each prints its figures with baselines measured in the same run.

        Exits 1 only if a benchmark crashes or its correctness checks fail, never on a timing.
        """
        from omni_core.bench.orchestration import BENCHES, Row
        from omni_core.bench.progress import QUICK_NOTE, shown
        from omni_core.cli.app import fail
        from omni_core.errors import PluginConflictError, RequestError

        selected = list(names or DEFAULT)
        try:
            registered = state.host.benchmarks() if set(selected) - set(ALL) else {}
        except Exception as exc:
            raise fail(state, exc) from None
        taken = sorted(set(registered) & set(ALL))
        if taken:
            raise fail(state, PluginConflictError(f"plugin benchmark(s) {taken} shadow built-ins"))
        known = (*ALL, *sorted(registered))
        unknown = [n for n in selected if n not in known]
        if unknown:
            raise fail(state, RequestError(f"unknown benchmark(s) {unknown}; known: {known}"))
        if "chaos" in selected:
            from omni_core.bench.chaos import check_args

            try:
                check_args(requests, concurrency)
            except RequestError as exc:
                raise fail(state, exc) from None
        if not state.debug:  # replica deaths and restarts are expected in chaos
            logging.getLogger("omni_core").setLevel(logging.ERROR)
        console = Console(width=160)
        err = Console(stderr=True)  # progress while each benchmark runs
        rows: list[Row] = []
        failed = False
        for name in selected:
            try:
                with shown(name, err):
                    if name == "chaos":
                        from omni_core.bench.chaos import main as chaos

                        failed |= chaos(300 if quick else requests, concurrency, seed) != 0
                    elif name == "vllm":
                        from omni_core.bench.vllm import bench_vllm

                        rows.extend(bench_vllm(quick))
                    elif name == "serve":
                        from omni_core.bench.serve import bench_serve

                        rows.extend(bench_serve(quick))
                    elif name == "pipeline":
                        from omni_core.bench.pipeline import bench_pipeline

                        rows.extend(bench_pipeline(quick))
                    elif name in registered:
                        rows.extend(registered[name].run(quick))
                    else:
                        rows.extend(BENCHES[name](quick))
            except Exception as exc:
                failed = True
                console.print(f"bench {name} failed: {type(exc).__name__}: {exc}", markup=False)
        if rows:
            table = Table(
                "bench",
                "case",
                "figure",
                "value",
                "baseline",
                "ratio",
                caption=QUICK_NOTE if quick else None,
            )
            for row in rows:
                base = "" if row.baseline is None else f"{row.baseline:,.2f} ({row.baseline_name})"
                ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
                table.add_row(
                    row.bench, row.case, row.figure, f"{row.value:,.2f} {row.unit}", base, ratio
                )
            console.print(table)
        raise typer.Exit(1 if failed else 0)
