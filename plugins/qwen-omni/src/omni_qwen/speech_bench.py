"""Speech-out metrics of ``qwen2.5-omni`` (tiny checkpoint): streamed vs whole-utterance token2wav
in the same run, at several concurrencies.

``python -m omni_qwen.speech_bench [--codes 200] [--concurrency 1 4 16] [--runs 1]
[--first-chunk CODES RIGHT] [--lookahead]`` (the token2wav stage's ``options.stream``:
``first_chunk_frames`` and ``first_right_context``, ``first_lookahead``)

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
) -> Any:
    """``qwen2.5-omni`` on the tiny checkpoint, its token2wav's first chunk and its talker's
    ``max_batch`` as given; without ``token2wav`` it ends at the talker (codes out)."""
    from omni_core import PipelineConfig

    config = omni_pipeline(TINY_MODEL)
    stream: dict[str, Any] = {"first_lookahead": True} if lookahead else {}
    if first_chunk:
        stream.update(first_chunk_frames=first_chunk[0], first_right_context=first_chunk[1])
    if not stream and max_batch is None and token2wav:
        return config
    data = config.model_dump(exclude_unset=True)
    stages = {s["name"]: s for s in data["stages"]}
    if stream:
        stages["token2wav"]["engine_args"]["options"] = {"stream": stream}
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


def main(argv: list[str] | None = None) -> None:
    from omni_core import AsyncOmniEngine, OmniSettings

    parser = argparse.ArgumentParser(prog="python -m omni_qwen.speech_bench")
    parser.add_argument("--codes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--runs", type=int, default=1, help="rounds per level (C=1: requests)")
    parser.add_argument("--first-chunk", type=int, nargs=2, metavar=("CODES", "RIGHT"))
    parser.add_argument("--lookahead", action="store_true", help="options.stream.first_lookahead")
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
    engine = AsyncOmniEngine(pipeline(args.first_chunk, args.lookahead), settings=OmniSettings())
    try:
        asyncio.run(level(engine, 24, True, 1))  # warm-up
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
