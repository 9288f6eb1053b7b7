"""``omni qwen-image generate``: ``omni run qwen-image`` with Qwen-Image's options by name.

The guidance options become omni-cfg's per-request override (``--extra cfg.…``: the core's CLI
knows nothing of guidance); ``--steps`` and ``--size`` are ``omni run``'s own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_GUIDANCE = 4.0  # QwenImagePipeline's true_cfg_scale

app = typer.Typer(no_args_is_help=True, help="Qwen-Image text-to-image (omni-qwen-image).")


@app.command("generate")
def generate(
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="What to draw.")],
    negative_prompt: Annotated[
        str | None,
        typer.Option("--negative-prompt", help="Guidance's negative prompt (needs omni-cfg)."),
    ] = None,
    guidance: Annotated[
        float | None,
        typer.Option(
            min=0,
            help=f"Guidance scale (true CFG; {DEFAULT_GUIDANCE:g} when only --negative-prompt "
            "is given; 1: unguided).",
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Denoising steps.")] = None,
    size: Annotated[str | None, typer.Option(help="WIDTHxHEIGHT, multiples of 16.")] = None,
    seed: Annotated[int | None, typer.Option(help="Noise seed.")] = None,
    pipeline: Annotated[str, typer.Option(help="Pipeline name or file.")] = "qwen-image",
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", file_okay=False, help="Where the PNG goes.")
    ] = Path("omni-out"),
) -> None:
    """Draw one image; writes OUTPUT_DIR/<request id>.png (exit codes as ``omni run``)."""
    from omni_core.cli import main

    argv = ["run", pipeline, "--prompt", prompt, "--output-dir", str(output_dir)]
    for flag, value in (("--steps", steps), ("--size", size), ("--seed", seed)):
        if value is not None:
            argv += [flag, str(value)]
    if negative_prompt is not None or guidance is not None:
        scale = DEFAULT_GUIDANCE if guidance is None else guidance
        argv += ["--extra", f"cfg.guidance_scale={scale!r}"]
        if negative_prompt is not None:
            argv += ["--extra", f"cfg.negative_prompt={json.dumps(negative_prompt)}"]
    raise typer.Exit(main(argv))
