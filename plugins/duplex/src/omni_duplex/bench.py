"""``omni bench duplex``: barge-in latency and commit → first audio on ``tiny-omni-duplex``, with
tiny-omni's time to first audio through the turn-based engine as the same-run baseline, and the
server VAD's figures.

* commit → first audio: a manual-commit session; 300 ms of speech appended, then ``commit`` with
  ``create_response``; the time from sending the commit to receiving the first audio delta.
* barge-in: a server-VAD session answering a long reply (``max_output_tokens``); once its first
  audio delta arrived, a spoken clip is streamed as a microphone delivers it (each 20 ms chunk
  once spoken); the time from the start of the clip to receiving the reply's ``response.done``
  (status ``cancelled``). It includes the VAD's ``min_speech_duration_ms`` (speech must last that
  long to count). Measured with the default VAD (Silero) and, as its baseline, the energy VAD
  (whose floor is ``min_speech_duration_ms``). ``cancelled → stages aborted`` bounds how long the
  reply's stage requests outlive its cancelled terminal.
* VAD: false barge-ins on noise and music at speech level, speech detected (clean and over
  noise/music), and the detector's cost per 20 ms chunk, Silero beside energy
  (:mod:`omni_duplex.vad_eval`; no engine involved).
* baseline: ``AsyncOmniEngine.generate`` on ``tiny-omni`` with the prompt the duplex model plans
  for the same turn; the time to its first audio output.

Checks (a failure exits 1): every committed turn completes with audio; every barge-in cancels
its reply, and nothing of a cancelled reply arrives after its ``response.done``; the Silero VAD
false-triggers on at most 5 % of the noise/music clips and detects at least 95 % of the speech.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from omni_core.plugin import CheckFailed, Row

from omni_duplex import protocol as P
from omni_duplex.config import WIRE_SAMPLE_RATE

logger = logging.getLogger(__name__)

CHUNK_MS = 20
SPEECH_MS = 300
MIN_SPEECH_MS = 100
LONG_REPLY_TOKENS = 400
MAX_FALSE_BARGE_INS = 0.05
MIN_SPEECH_DETECTED = 0.95
STALL_S = 30.0
ANY: set[str] = set()  # _next: any event


def speech(ms: int, amp: float = 0.3, freq: float = 220.0) -> bytes:
    import numpy as np

    from omni_duplex.audio import encode_pcm16

    t = np.arange(WIRE_SAMPLE_RATE * ms // 1000) / WIRE_SAMPLE_RATE
    return encode_pcm16(amp * np.sin(2 * np.pi * freq * t))


def spoken(name: str = "speech_hold_on") -> bytes:
    """One of the package's speech clips as wire audio (pcm16 at 24 kHz)."""
    from omni_duplex.audio import encode_pcm16, resample
    from omni_duplex.vad_eval import CLIP_DIR, RATE, load_speech

    (clip,) = load_speech(CLIP_DIR, f"{name}.wav")
    return encode_pcm16(resample(clip, RATE, WIRE_SAMPLE_RATE))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _next(session: Any, kinds: set[str]) -> P.DuplexEvent:
    """The next event of one of ``kinds`` (errors, an early end and a stall fail the run)."""
    while True:
        try:
            async with asyncio.timeout(STALL_S):
                event = await session.recv()
        except TimeoutError:
            raise CheckFailed(f"no event in {STALL_S:.0f} s (awaiting {sorted(kinds)})") from None
        if event.type == P.ERROR:
            raise CheckFailed(f"session error: {event.data}")
        if event.terminal:
            raise CheckFailed(f"session ended early: {event.type}")
        if event.type in kinds or kinds is ANY:
            return event


async def commit_to_first_audio(engine: Any, turns: int) -> list[float]:
    """Seconds from sending ``commit`` to receiving the first audio delta, per turn."""
    session = await engine.open_session({"turn_detection": None})
    pcm, out = speech(SPEECH_MS), []
    try:
        for _ in range(turns):
            session.send(P.AppendAudio(audio=pcm))
            start = time.monotonic()
            session.send(P.Commit(create_response=True))
            await _next(session, {P.AUDIO_DELTA})
            out.append(time.monotonic() - start)
            done = await _next(session, {P.RESPONSE_DONE})
            if done.data["status"] != "completed" or not done.data["audio_ms"]:
                raise CheckFailed(f"a committed turn ended {done.data['status']} without audio")
    finally:
        await session.close()
    return out


async def _stream_until(session: Any, pcm: bytes, start: float, stop: asyncio.Future[Any]) -> None:
    """Send ``pcm`` as a microphone would from ``start``: each CHUNK_MS chunk once it has been
    spoken (chunk i at start + (i + 1) * CHUNK_MS), until ``stop`` is done."""
    step = WIRE_SAMPLE_RATE * CHUNK_MS // 1000 * 2
    for i, offset in enumerate(range(0, len(pcm), step)):
        due = start + (i + 1) * CHUNK_MS / 1000
        await asyncio.wait({stop}, timeout=max(0.0, due - time.monotonic()))
        if stop.done():
            return
        session.send(P.AppendAudio(audio=pcm[offset : offset + step]))


async def barge_in(
    engine: Any, turns: int, vad: str | None = None
) -> tuple[list[float], list[float]]:
    """(user speech start → the reply's cancelled ``response.done`` received, that
    ``response.done`` → the stage requests aborted), per turn, in seconds. The second is an upper
    bound: the session applies the next command (a clear) only after the abort returned.
    ``vad``: the server VAD (default: the pipeline's)."""
    session = await engine.open_session(
        {
            "max_output_tokens": LONG_REPLY_TOKENS,
            "turn_detection": {
                "vad": vad,
                "silence_duration_ms": 200,
                "min_speech_duration_ms": MIN_SPEECH_MS,
                "prefix_padding_ms": 0,
            },
        }
    )
    pcm = spoken()
    client: list[float] = []
    aborted: list[float] = []
    try:
        for _ in range(turns):
            session.send(P.AppendText(text="Tell me a long story."))
            session.send(P.Commit(create_response=True))
            created = await _next(session, {P.RESPONSE_CREATED})
            reply = created.data["response_id"]
            await _next(session, {P.AUDIO_DELTA})
            cancelled: asyncio.Future[P.DuplexEvent] = asyncio.get_running_loop().create_future()
            start = time.monotonic()
            sender = asyncio.ensure_future(_stream_until(session, pcm, start, cancelled))
            try:
                started = await _next(session, {P.SPEECH_STARTED, P.RESPONSE_DONE})
                if started.type != P.SPEECH_STARTED:
                    raise CheckFailed("the reply ended before the barge-in (reply too short)")
                done = await _next(session, {P.RESPONSE_DONE})
                cancelled.set_result(done)
                client.append(time.monotonic() - start)
            finally:
                if not cancelled.done():
                    cancelled.cancel()
                await sender
            if done.data["response_id"] != reply or done.data["status"] != "cancelled":
                raise CheckFailed(f"barge-in gave {done.data['status']} for {reply}")
            session.send(P.ClearInput())
            while (event := await _next(session, ANY)).type != P.INPUT_CLEARED:
                if event.data.get("response_id") == reply:
                    raise CheckFailed(f"{event.type} of cancelled reply {reply} after its done")
                if event.type == P.RESPONSE_CREATED:
                    raise CheckFailed("a response started from the barge-in speech before clear")
            aborted.append(event.t - done.t)
    finally:
        await session.close()
    return client, aborted


async def _turn_based_first_audio(engine: Any, prompt: str, turns: int) -> list[float]:
    out = []
    for _ in range(turns):
        start, first = time.monotonic(), None
        async for o in engine.generate(prompt):
            if first is None and o.output_type == "audio" and o.payload is not None:
                first = time.monotonic() - start
        if first is None:
            raise CheckFailed("tiny-omni produced no audio")
        out.append(first)
    return out


def vad_rows() -> list[Row]:
    """False barge-ins, speech detected and cost per 20 ms chunk: Silero beside energy."""
    from omni_duplex import vad_eval

    clips = vad_eval.trials(vad_eval.load_speech())
    silero, energy = (vad_eval.score(kind, clips) for kind in ("silero", "energy"))
    logger.info("duplex VAD figures:\n%s", vad_eval.report([silero, energy]))
    if silero.false_rate > MAX_FALSE_BARGE_INS or silero.detect_rate < MIN_SPEECH_DETECTED:
        raise CheckFailed(f"Silero VAD below its figures:\n{vad_eval.report([silero])}")
    n = f"{silero.noise_clips} noise/music, {silero.speech_trials} speech clips"
    rows = [
        Row("duplex", n, "VAD false barge-ins (silero)", 100 * silero.false_rate, "%"),
        Row("duplex", n, "VAD false barge-ins (energy)", 100 * energy.false_rate, "%"),
        Row("duplex", n, "VAD speech detected (silero)", 100 * silero.detect_rate, "%"),
        Row("duplex", n, "VAD speech detected (energy)", 100 * energy.detect_rate, "%"),
    ]
    for q in (0.5, 0.99):
        name = f"VAD cost per 20 ms chunk p{int(q * 100)} (silero)"
        rows.append(Row("duplex", n, name, silero.chunk_us(q), "µs", energy.chunk_us(q), "energy"))
    return rows


def bench_duplex(quick: bool) -> list[Row]:
    from omni_core import AsyncOmniEngine, create_engine

    turns = 5 if quick else 50
    vad = vad_rows()
    engine: Any = create_engine("tiny-omni-duplex")
    try:
        asyncio.run(commit_to_first_audio(engine, 1))  # warm-up
        commit = asyncio.run(commit_to_first_audio(engine, turns))
        client, aborted = asyncio.run(barge_in(engine, turns))  # the default VAD: Silero
        energy, _ = asyncio.run(barge_in(engine, turns, vad="energy"))
    finally:
        engine.shutdown()
    prompt = f"(the user spoke for {SPEECH_MS / 1000:.1f} seconds)"  # the tiny-omni plug's prompt
    turn_engine = AsyncOmniEngine("tiny-omni")
    try:
        asyncio.run(_turn_based_first_audio(turn_engine, prompt, 1))  # warm-up
        base = asyncio.run(_turn_based_first_audio(turn_engine, prompt, turns))
    finally:
        turn_engine.shutdown()
    n = f"{turns} turns"
    base50, base99 = pct(base, 0.5) * 1e3, pct(base, 0.99) * 1e3
    rows = [
        Row("duplex", n, "turn-based first audio p50", base50, "ms"),
        Row("duplex", n, "turn-based first audio p99", base99, "ms"),
        Row("duplex", n, "commit → first audio p50", pct(commit, 0.5) * 1e3, "ms", base50, "turn"),
        Row("duplex", n, "commit → first audio p99", pct(commit, 0.99) * 1e3, "ms", base99, "turn"),
    ]
    for q in (0.5, 0.99):
        p = f"p{int(q * 100)}"
        silero_ms, energy_ms = pct(client, q) * 1e3, pct(energy, q) * 1e3
        name = f"barge-in: speech → cancelled {p}"
        rows.append(Row("duplex", n, f"{name} (silero)", silero_ms, "ms", energy_ms, "energy VAD"))
        rows.append(
            Row("duplex", n, f"{name} (energy)", energy_ms, "ms", MIN_SPEECH_MS, "VAD min speech")
        )
    rows.append(
        Row("duplex", n, "cancelled → stages aborted p50 (≤)", pct(aborted, 0.5) * 1e3, "ms")
    )
    from omni_duplex.bench_omni import omni_rows

    return rows + vad + omni_rows(quick)
