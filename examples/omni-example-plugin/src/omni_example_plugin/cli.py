"""``omni example stats``: run prompts through a pipeline, count terminal outcomes."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Commands of the example plugin.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)


@app.command("stats")
def stats(
    prompt: Annotated[
        list[str], typer.Option("--prompt", "-p", help="A prompt (repeat for several).")
    ],
    pipeline: Annotated[
        str, typer.Option("--pipeline", help="Pipeline YAML file or registered name.")
    ] = "example-reverse",
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="Max tokens per stage.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Run each prompt once, concurrently; print terminal outcomes by finish_reason."""
    from omni_core import OmniSettings, SamplingParams, create_engine
    from omni_core.plugin import PluginHost, report_error

    settings = OmniSettings()
    try:
        engine = create_engine(pipeline, settings=settings, plugins=PluginHost.create(settings))
    except Exception as exc:  # bad pipeline or plugin: exit 2, one stderr line per problem
        raise typer.Exit(report_error(exc, debug=False)) from None
    counter = engine.pipeline_plugin("example")  # this engine's OutcomeCounter
    try:
        params = None if max_tokens is None else SamplingParams(max_tokens=max_tokens)
        asyncio.run(_run_all(engine, prompt, params))
    except Exception as exc:
        raise typer.Exit(report_error(exc, debug=False)) from None
    finally:
        engine.shutdown()
    counts = counter.snapshot() if counter is not None else {}
    if as_json:
        typer.echo(json.dumps(counts, sort_keys=True))
    else:
        for reason, count in counts.items():
            typer.echo(f"{reason}\t{count}")


async def _run_all(engine: Any, prompts: list[str], params: Any) -> None:
    async def one(text: str) -> None:
        async for _ in engine.generate(text, sampling_params=params):
            pass

    await asyncio.gather(*(one(text) for text in prompts))
