"""``omni duplex ...``: the duplex plugin's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

app = typer.Typer(
    help="Full-duplex speech sessions (omni-duplex).",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)


@app.command("talk")
def talk_command(
    wav: Annotated[Path, typer.Argument(help="Input WAV (16-bit PCM; any rate, mono or not).")],
    url: Annotated[
        str | None, typer.Option("--url", help="ws://HOST:PORT/v1/realtime of `omni serve`.")
    ] = None,
    pipeline: Annotated[
        str, typer.Option("--pipeline", help="Pipeline (in-process mode).")
    ] = "tiny-omni-duplex",
    fast: Annotated[bool, typer.Option("--fast", help="Stream faster than real time.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Directory for the outputs.")] = Path("."),
    max_output_tokens: Annotated[
        int | None,
        typer.Option("--max-output-tokens", help="Reply length limit (sent as session.update)."),
    ] = None,
    silence_ms: Annotated[
        int | None,
        typer.Option("--silence-ms", help="Server VAD: silence that ends a turn (ms)."),
    ] = None,
    vad: Annotated[
        Literal["silero", "energy"] | None,
        typer.Option("--vad", help="Server VAD: silero (trained) or energy (default: server's)."),
    ] = None,
) -> None:
    """Stream WAV into a session; write reply.wav and timeline.jsonl; print both paths."""
    import asyncio

    from omni_core.plugin import report_error

    from omni_duplex.talk import talk

    if not wav.is_file():
        typer.echo(f"error: {wav}: no such file", err=True)
        raise typer.Exit(2)
    target: object = Path(pipeline) if Path(pipeline).exists() else pipeline
    session: dict[str, object] = {}
    if max_output_tokens is not None:
        session["max_output_tokens"] = max_output_tokens
    turn_detection: dict[str, object] = {}
    if silence_ms is not None:
        turn_detection["silence_duration_ms"] = silence_ms
    if vad is not None:
        turn_detection["vad"] = vad
    if turn_detection:
        session["turn_detection"] = {"type": "server_vad", **turn_detection}
    try:
        reply, timeline = asyncio.run(
            talk(wav, out_dir=out, url=url, pipeline=target, fast=fast, session=session)
        )
    except Exception as exc:
        raise typer.Exit(report_error(exc, debug=False)) from None
    typer.echo(str(reply))
    typer.echo(str(timeline))
