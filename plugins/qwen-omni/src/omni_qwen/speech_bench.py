"""Speech-out metrics of ``qwen2.5-omni`` (tiny checkpoint): streamed vs whole-utterance token2wav
in the same run, at several concurrencies.

``python -m omni_qwen.speech_bench [--codes 200] [--concurrency 1 4 16] [--runs 1]
[--first-chunk CODES RIGHT] [--lookahead] [--first-steps N] [--plain-first] [--breakdown]``
(the token2wav stage's ``options.stream``, merged over the pipeline's own
(``omni_qwen.pipelines.STREAM_OPTIONS``): ``first_chunk_frames`` and ``first_right_context``,
``first_lookahead``, ``first_steps``; ``--plain-first``: over ``StreamOptions``' defaults instead,
a first chunk like the others on the full ODE). ``--breakdown``: where a streamed request's first
audio goes at C=1 (the thinker's text, the stages' first outputs, the first chunk's DiT and
BigVGAN compute in this process), medians of ``--runs`` (at least 3) requests.

Per request, from the ``generate()`` call: **TTFP** (time to the first output carrying audio),
**RTF** (time from the call to the last audio / the audio's duration: decode time per second of
speech), **underruns** (audio chunks arriving after the previous audio, played from its arrival at
real time, ran out). p50/p99 over the requests of a concurrency level. The talker is forced to
``--codes`` codes (its ``max_tokens``; the tiny random talker never stops by itself), the thinker
to 16 tokens; greedy, token2wav seeded.

``--throughput [C ...]``: requests/s of whole-utterance requests at each concurrency C (C at
once, ``--runs`` rounds, requests/s = C / the round's wall time) with the talker batching its
decode steps (``options.max_batch``, the default) and without (``max_batch: 1``: a forward per
request, as before issue 27 item 6): two engines, their rounds alternated, the same load for both.
``--no-token2wav``: the pipeline ends at the talker (its codes the final output), so the rate is
the thinker's and the talker's, without the vocoder's whole-utterance decode.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from omni_qwen.pipelines import TINY_MODEL, omni_pipeline
from omni_qwen.token2wav import SAMPLE_RATE

PROMPT = "<|im_start|>user\nTell me about the sea.<|im_end|>\n<|im_start|>assistant\n"


@dataclass
class Speech:
    ttfp: float
    rtf: float
    underruns: int
    seconds: float  # audio duration


def params(codes: int, stream: bool) -> dict[str, Any]:
    return {
        "thinker": {"max_tokens": 16, "temperature": 0.0},
        "talker": {"temperature": 0.0, "max_tokens": codes},
        "token2wav": {"seed": 0, "extra": {"audio_stream": stream}},
    }


async def one(engine: Any, codes: int, stream: bool) -> Speech:
    start = time.perf_counter()
    first = last = None
    played_until = 0.0  # when the audio received so far runs out, playing from first arrival
    underruns, samples = 0, 0
    async for out in engine.generate(PROMPT, sampling_params=params(codes, stream)):
        if out.error is not None:
            raise RuntimeError(out.error.message)
        if out.output_type != "audio" or out.payload is None:
            continue
        now = time.perf_counter() - start
        n = len(out.payload.samples)
        if n == 0:
            continue
        if first is None:
            first, played_until = now, now
        elif now > played_until:
            underruns += 1
            played_until = now
        played_until += n / SAMPLE_RATE
        samples += n
        last = now
    if first is None or last is None:
        raise RuntimeError("no audio")
    seconds = samples / SAMPLE_RATE
    return Speech(first, last / seconds, underruns, seconds)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def level(engine: Any, codes: int, stream: bool, concurrency: int) -> list[Speech]:
    return list(await asyncio.gather(*(one(engine, codes, stream) for _ in range(concurrency))))


def pipeline(
    first_chunk: list[int] | None,
    lookahead: bool = False,
    max_batch: int | None = None,
    token2wav: bool = True,
    first_steps: int | None = None,
    plain_first: bool = False,
) -> Any:
    """``qwen2.5-omni`` on the tiny checkpoint, its token2wav's first chunk (codes, right
    context, ``first_lookahead``, ``first_steps``: merged over the pipeline's stream options, or
    with ``plain_first`` over ``StreamOptions``' own defaults: a first chunk like the others, on
    the full ODE) and its talker's ``max_batch`` as given; without ``token2wav`` it ends at the
    talker (codes out)."""
    from omni_core import PipelineConfig

    config = omni_pipeline(TINY_MODEL)
    stream: dict[str, Any] = {"first_lookahead": True} if lookahead else {}
    if first_chunk:
        stream.update(first_chunk_frames=first_chunk[0], first_right_context=first_chunk[1])
    if first_steps is not None:
        stream["first_steps"] = first_steps
    if not stream and not plain_first and max_batch is None and token2wav:
        return config
    data = config.model_dump(exclude_unset=True)
    stages = {s["name"]: s for s in data["stages"]}
    if stream or plain_first:
        options = stages["token2wav"]["engine_args"].setdefault("options", {})
        options["stream"] = {**({} if plain_first else options.get("stream", {})), **stream}
    if max_batch is not None:
        options = stages["talker"]["engine_args"].setdefault("options", {})
        options["max_batch"] = max_batch
    if not token2wav:
        data["stages"].remove(stages["token2wav"])
        stages["talker"].update(final_output=True, final_output_type="tokens")
    return PipelineConfig.from_dict(data, source=config.source)


async def rate(engine: Any, codes: int, concurrency: int, token2wav: bool = True) -> float:
    """Requests/s of one round: ``concurrency`` whole-utterance requests at once, each read to
    its end."""
    sampling = params(codes, False)
    if not token2wav:
        del sampling["token2wav"]

    async def request() -> None:
        async for out in engine.generate(PROMPT, sampling_params=sampling):
            if out.error is not None:
                raise RuntimeError(out.error.message)

    start = time.perf_counter()
    await asyncio.gather(*(request() for _ in range(concurrency)))
    return concurrency / (time.perf_counter() - start)


def throughput(codes: int, levels: list[int], runs: int, token2wav: bool = True) -> None:
    """Requests/s with and without talker batching, the two engines' rounds alternated."""
    from omni_core import AsyncOmniEngine, OmniSettings

    modes = {"one forward per request (max_batch 1)": 1, "batched (default)": None}
    engines = {
        name: AsyncOmniEngine(
            pipeline(None, max_batch=n, token2wav=token2wav), settings=OmniSettings()
        )
        for name, n in modes.items()
    }
    try:
        for engine in engines.values():
            asyncio.run(rate(engine, 24, 2, token2wav))  # warm-up
        print("| talker | C | requests/s (median of rounds) | rounds |")
        print("|---|---|---|---|")
        for c in levels:
            got: dict[str, list[float]] = {name: [] for name in engines}
            for _ in range(runs):
                for name, engine in engines.items():
                    got[name].append(asyncio.run(rate(engine, codes, c, token2wav)))
            for name, rates in got.items():
                shown = ", ".join(f"{r:.2f}" for r in rates)
                print(f"| {name} | {c} | {statistics.median(rates):.2f} | {shown} |", flush=True)
    finally:
        for engine in engines.values():
            engine.shutdown()


async def timeline(engine: Any, codes: int) -> dict[str, float]:
    """One streamed request's marks (ms from the call: the thinker's first and last text, the
    first audio) and the stages' own times from their submit (the final output's metrics)."""
    start = time.perf_counter()
    marks: dict[str, float] = {}
    async for out in engine.generate(PROMPT, sampling_params=params(codes, True)):
        if out.error is not None:
            raise RuntimeError(out.error.message)
        now = (time.perf_counter() - start) * 1e3
        if out.output_type == "text":
            marks.setdefault("call → thinker's first text", now)
            if out.finish_reason is not None:
                marks["call → thinker's last text"] = now
        elif out.payload is not None and len(out.payload.samples):
            marks.setdefault("call → first audio", now)
        if out.finished:
            marks.update({f"{k} (from its submit)": v for k, v in out.metrics.items()})
    return marks


def first_chunk_cost(stream: dict[str, Any], runs: int = 5) -> dict[str, float]:
    """The first streamed chunk's token2wav compute in this process (one thread, the tiny
    checkpoint, ``stream``: the stage's stream options): medians in ms of the DiT window, the
    vocoder and the whole ``step``."""
    from pathlib import Path

    import torch

    from omni_core import OmniSettings
    from omni_core.extend import resolve_model
    from omni_core.plugin import PluginHost
    from omni_qwen.fidelity import codes_of
    from omni_qwen.stream_wav import ChunkSynth, StreamDecoder, StreamOptions
    from omni_qwen.token2wav import Token2WavOptions, load_speakers, load_token2wav

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model_dir = Path(resolve_model(TINY_MODEL, PluginHost.create(OmniSettings())))
        model, _ = load_token2wav(model_dir)
        speaker = load_speakers(model_dir)["Chelsie"]
        synth = ChunkSynth(model, Token2WavOptions(), StreamOptions(**stream))
        spent: dict[str, list[float]] = {"DiT window": [], "BigVGAN": [], "first chunk": []}

        def timed(name: str, fn: Any) -> Any:
            def call(*args: Any) -> Any:
                t = time.perf_counter()
                try:
                    return fn(*args)
                finally:
                    spent[name].append((time.perf_counter() - t) * 1e3)

            return call

        synth.mel = timed("DiT window", synth.mel)  # type: ignore[method-assign]
        synth.wave = timed("BigVGAN", synth.wave)  # type: ignore[method-assign]
        n = sum(synth.stream.sizes(0))
        for _ in range(runs):
            decoder = StreamDecoder(synth, 0, speaker)
            timed("first chunk", decoder.step)(codes_of(n), False)
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(v) for name, v in spent.items()}


def breakdown(engine: Any, codes: int, runs: int, stream: dict[str, Any]) -> None:
    """Where a streamed request's first audio goes at C=1: medians of ``runs`` requests."""
    got: dict[str, list[float]] = {}
    for _ in range(runs):
        for k, v in asyncio.run(timeline(engine, codes)).items():
            got.setdefault(k, []).append(v)
    cost = first_chunk_cost(stream, max(3, runs))
    print(f"| first streamed audio, C=1 (stream options {stream or 'default'}) | ms (median) |")
    print("|---|---|")
    for k, v in got.items():
        print(f"| {k} | {statistics.median(v):.0f} |")
    for k, ms in cost.items():
        print(f"| token2wav {k} compute (in-process, 1 thread) | {ms:.0f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    from omni_core import AsyncOmniEngine, OmniSettings

    parser = argparse.ArgumentParser(prog="python -m omni_qwen.speech_bench")
    parser.add_argument("--codes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--runs", type=int, default=1, help="rounds per level (C=1: requests)")
    parser.add_argument("--first-chunk", type=int, nargs=2, metavar=("CODES", "RIGHT"))
    parser.add_argument("--lookahead", action="store_true", help="options.stream.first_lookahead")
    parser.add_argument("--first-steps", type=int, help="options.stream.first_steps")
    parser.add_argument(
        "--plain-first",
        action="store_true",
        help="the first chunk like the others (StreamOptions' defaults, not the pipeline's)",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="where the first streamed audio's time goes"
    )
    parser.add_argument(
        "--throughput",
        type=int,
        nargs="*",
        metavar="C",
        help="requests/s at these concurrencies (default 8 16), talker batched vs not",
    )
    parser.add_argument(
        "--no-token2wav", action="store_true", help="--throughput of thinker + talker only"
    )
    args = parser.parse_args(argv)
    if args.throughput is not None:
        throughput(args.codes, args.throughput or [8, 16], args.runs, not args.no_token2wav)
        return
    config = pipeline(
        args.first_chunk, args.lookahead, first_steps=args.first_steps, plain_first=args.plain_first
    )
    engine = AsyncOmniEngine(config, settings=OmniSettings())
    try:
        asyncio.run(level(engine, 24, True, 1))  # warm-up
        if args.breakdown:
            (t2w,) = [s for s in config.stages if s.name == "token2wav"]
            stream = dict((t2w.engine_args.get("options") or {}).get("stream", {}))
            breakdown(engine, args.codes, max(args.runs, 3), stream)
            return
        print("| mode | C | TTFP p50 / p99 (s) | RTF p50 / p99 | underruns (total) | audio (s) |")
        print("|---|---|---|---|---|---|")
        for c in args.concurrency:
            for stream in (False, True):  # interleaved: the same load for both
                got: list[Speech] = []
                for _ in range(args.runs):
                    got += asyncio.run(level(engine, args.codes, stream, c))
                ttfp, rtf = [s.ttfp for s in got], [s.rtf for s in got]
                print(
                    f"| {'streamed' if stream else 'whole'} | {c} | {pct(ttfp, 0.5):.2f} / "
                    f"{pct(ttfp, 0.99):.2f} | {pct(rtf, 0.5):.2f} / {pct(rtf, 0.99):.2f} | "
                    f"{sum(s.underruns for s in got)} | "
                    f"{statistics.median(s.seconds for s in got):.2f} |",
                    flush=True,
                )
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
