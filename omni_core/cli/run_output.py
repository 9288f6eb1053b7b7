"""``omni run``'s output side: the streamed answer, the WAV written as it arrives, the summary
(outputs per stage, per-stage timings, finish reason) and the media written."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from omni_core.outputs import OmniRequestOutput


def refused(final: OmniRequestOutput) -> bool:
    """The request failed for its own input (a 4xx: an unknown voice, a prompt too long...)."""
    return final.error is not None and 400 <= final.error.status_code < 500


class WavSink:
    """The run's audio, written as it arrives (:class:`omni_core.media.WavStream`, named after
    the request); ``first_audio``: seconds from ``start()`` to the first samples."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.wav: Any = None
        self.first_audio: float | None = None
        self._started = 0.0

    def start(self) -> None:
        self._started = time.perf_counter()

    def write(self, request_id: str, chunk: Any) -> None:
        from omni_core.media import WavStream

        if self.wav is None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self.wav = WavStream(self.output_dir / f"{request_id}.wav", chunk.sample_rate)
        if self.first_audio is None and len(chunk.samples):
            self.first_audio = time.perf_counter() - self._started
        self.wav.write(chunk)

    def close(self) -> None:
        if self.wav is not None:
            self.wav.close()


async def stream(
    engine: Any, prompt: Any, params: Any, modalities: list[str] | None, sink: WavSink
) -> list[OmniRequestOutput]:
    from omni_core.media import AudioChunk

    err = Console(stderr=True)
    outputs: list[OmniRequestOutput] = []
    tasks: dict[str, Any] = {}
    current: str | None = None
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} out"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,  # a pipe gets no progress (nor its closing newline)
    ) as progress:
        sink.start()
        async for out in engine.generate(prompt, sampling_params=params, modalities=modalities):
            outputs.append(out)
            if isinstance(out.payload, AudioChunk):
                sink.write(out.request_id, out.payload)
            if out.stage_name not in tasks:
                tasks[out.stage_name] = progress.add_task(out.stage_name, total=None)
            progress.advance(tasks[out.stage_name])
            if out.output_type == "text" and out.text:
                if current != out.stage_name:
                    prefix = "\n" if current is not None else ""
                    sys.stdout.write(f"{prefix}[{out.stage_name}] ")
                    current = out.stage_name
                sys.stdout.write(out.text)
                sys.stdout.flush()
    if current is not None:
        sys.stdout.write("\n")
    return outputs


def summary(outputs: list[OmniRequestOutput]) -> None:
    console = Console()
    by_stage: dict[str, list[OmniRequestOutput]] = {}
    for out in outputs:
        by_stage.setdefault(out.stage_name, []).append(out)
    for name, outs in by_stage.items():
        outs = [o for o in outs if o.error is None]  # an error terminal is no output
        if outs and outs[0].output_type != "text":
            tokens = sum(len(o.token_ids) for o in outs)
            console.print(
                f"[{name}] {outs[0].output_type}: {len(outs)} outputs, {tokens} tokens",
                markup=False,
            )
    final = outputs[-1] if outputs else None
    if final is not None and final.error is not None and not refused(final):
        console.print(
            f"error: {final.error.type}: {final.error.message}", style="red", markup=False
        )
    metrics = final.metrics if final is not None else {}
    if final is not None and final.error is not None and refused(final):
        what = "the request was refused" if not metrics else "a stage refused the request"
        console.print(f"{what} ({final.error.status_code})", markup=False)
    if not metrics:  # refused before any stage ran: no timings to show
        if final is not None:
            console.print(f"finish_reason: {final.finish_reason}")
        return
    table = Table("stage", "first output (ms)", "total (ms)", title="per-stage timing")
    stages = list(dict.fromkeys(k.rsplit(".", 1)[0] for k in metrics))
    for stage in stages:
        first = metrics.get(f"{stage}.first_output_ms")
        total = metrics.get(f"{stage}.total_ms")
        table.add_row(
            stage,
            f"{first:.2f}" if first is not None else "-",
            f"{total:.2f}" if total is not None else "-",
        )
    console.print(table)
    if final is not None:
        console.print(f"finish_reason: {final.finish_reason}")


def write_media(outputs: list[OmniRequestOutput], output_dir: Path, sink: WavSink) -> None:
    """Print the WAV's path (written as the audio came, ``sink``) with the time to first audio,
    write a final payload with a ``save(output_dir, stem) -> str`` method through it (printing
    what it returns), and write the last image as a PNG."""
    from omni_core.media import Image, write_png

    if sink.wav is not None:
        wav = sink.wav
        print(f"audio: {wav.path} ({wav.samples / wav.rate:.2f}s at {wav.rate} Hz)")
        if sink.first_audio is not None:
            print(f"time to first audio: {sink.first_audio:.2f}s")
    for out in outputs:  # a plugin's own final media (omni-wan's Video): it writes itself
        save = getattr(out.payload, "save", None)
        if out.finished and out.error is None and callable(save):
            print(save(output_dir, out.request_id))
    images = [o.payload for o in outputs if isinstance(o.payload, Image)]
    if images:
        output_dir.mkdir(parents=True, exist_ok=True)
        request_id = outputs[-1].request_id
        path = write_png(images[-1], output_dir / f"{request_id}.png")
        height, width = images[-1].pixels.shape[:2]
        print(f"image: {path} ({width}x{height})")
