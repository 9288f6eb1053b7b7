"""``omni bench duplex`` on a real omni model: ``qwen2.5-omni-duplex`` (omni-qwen's pipeline, when
installed), the thinker hearing the user's audio.

* end of speech → first reply audio: a server-VAD (Silero) session per turn; a spoken question
  (``speech_question``, ~1 s) streamed in real time, then silence until the reply's first audio
  delta; the time from the end of the speech (its last chunk sent) to that delta. It includes the
  VAD's ``silence_duration_ms`` (:data:`SILENCE_MS`).
* barge-in → cancelled: :func:`omni_duplex.bench.barge_in` (speech start → the reply's cancelled
  ``response.done``), one fresh session per turn (a cancelled 400-token reply stays in the
  history: one session would reach the thinker's ``max_model_len`` within a few turns).
* prefill per turn: a 10-turn typed conversation in one session (short replies); the thinker
  stage's prefilled tokens per turn (its ``get_state``). ``qwen2.5-omni-duplex`` keeps one
  resumable request per session (only the new turn is prefilled); the same conversation runs
  again, same run, on its fallback (the thinker stage's ``options.resumable: false``: a fresh
  request per response, prefilling the whole conversation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from omni_core.plugin import CheckFailed, Row

from omni_duplex import protocol as P
from omni_duplex.bench import CHUNK_MS, _next, barge_in, pct, spoken
from omni_duplex.config import WIRE_SAMPLE_RATE

logger = logging.getLogger(__name__)

PIPELINE = "qwen2.5-omni-duplex"
SILENCE_MS = 200
CONVERSATION_TURNS = 10


async def speech_end_to_first_audio(engine: Any, turns: int) -> list[float]:
    """Seconds from the end of the spoken question to the reply's first audio delta, per turn."""
    pcm, step, out = spoken("speech_question"), WIRE_SAMPLE_RATE * CHUNK_MS // 1000 * 2, []
    quiet = b"\x00\x00" * (WIRE_SAMPLE_RATE * CHUNK_MS // 1000)
    for _ in range(turns):
        session = await engine.open_session(
            {
                "max_output_tokens": 32,
                "turn_detection": {"silence_duration_ms": SILENCE_MS, "prefix_padding_ms": 0},
            }
        )
        try:
            first: asyncio.Future[P.DuplexEvent] = asyncio.get_running_loop().create_future()

            async def watch(session: Any = session, first: Any = first) -> None:
                first.set_result(await _next(session, {P.AUDIO_DELTA}))

            watcher = asyncio.ensure_future(watch())
            start = time.monotonic()
            chunks = [pcm[i : i + step] for i in range(0, len(pcm), step)]
            for i, chunk in enumerate(chunks):
                await asyncio.sleep(max(0.0, start + (i + 1) * CHUNK_MS / 1000 - time.monotonic()))
                session.send(P.AppendAudio(audio=chunk))
            end = time.monotonic()
            n = len(chunks)
            while not first.done() and not watcher.done():  # silence, as a microphone sends it
                n += 1
                await asyncio.wait({watcher}, timeout=max(0.0, start + n * 0.02 - time.monotonic()))
                session.send(P.AppendAudio(audio=quiet))
            await watcher
            out.append(first.result().t - end)  # the event's emission time: no queueing after it
        finally:
            await session.close()
    return out


async def prefill_per_turn(engine: Any, turns: int) -> list[int]:
    """The thinker's prefilled tokens for each turn of one typed conversation."""
    session = await engine.open_session(
        {"turn_detection": None, "max_output_tokens": 16, "output_modalities": ["text"]}
    )
    out = []
    try:
        for i in range(turns):
            before = await _prefilled(engine)
            session.send(P.AppendText(text=f"Turn {i}: what should I cook tonight?", commit=True))
            session.send(P.CreateResponse())
            done = await _next(session, {P.RESPONSE_DONE})
            if done.data["status"] != "completed":
                raise CheckFailed(f"conversation turn {i} ended {done.data['status']}")
            out.append(await _prefilled(engine) - before)
    finally:
        await session.close()
    return out


async def _prefilled(engine: Any) -> int:
    (state,) = await engine.collective_rpc("get_state", stage_ids=[0])
    return int(state["prefilled_tokens"])


def _fallback_prefill() -> list[int]:
    """The same conversation on the pipeline's fallback (a fresh thinker request per response)."""
    from omni_core import OmniSettings, create_engine
    from omni_core.plugin import PluginHost

    config = PluginHost.create(OmniSettings()).pipeline_config(PIPELINE)
    config.stages[0].engine_args.setdefault("options", {})["resumable"] = False
    engine: Any = create_engine(config)
    try:
        prefill = asyncio.run(prefill_per_turn(engine, CONVERSATION_TURNS))
    finally:
        engine.shutdown()
    logger.info("%s fallback: thinker prefill per turn %s", PIPELINE, prefill)
    return prefill


def omni_rows(quick: bool) -> list[Row]:
    """The rows of ``qwen2.5-omni-duplex``; none (logged) when omni-qwen is not installed."""
    from omni_core import ConfigError, create_engine

    turns = 3 if quick else 10
    try:
        engine: Any = create_engine(PIPELINE)
    except ConfigError as exc:
        logger.warning("omni bench duplex: %s not run (%s)", PIPELINE, exc)
        return []
    try:
        asyncio.run(speech_end_to_first_audio(engine, 1))  # warm-up
        first = asyncio.run(speech_end_to_first_audio(engine, turns))
        client: list[float] = []
        for _ in range(turns):
            got, _ = asyncio.run(barge_in(engine, 1))
            client += got
        prefill = asyncio.run(prefill_per_turn(engine, CONVERSATION_TURNS))
    finally:
        engine.shutdown()
    n, c = f"{PIPELINE}, {turns} turns", f"{PIPELINE}, {CONVERSATION_TURNS}-turn conversation"
    rows = []
    for q in (0.5, 0.99):
        p = f"p{int(q * 100)}"
        end_ms, cancel_ms = pct(first, q) * 1e3, pct(client, q) * 1e3
        rows.append(Row("duplex", n, f"end of speech → first audio {p}", end_ms, "ms"))
        rows.append(Row("duplex", n, f"barge-in: speech → cancelled {p}", cancel_ms, "ms"))
    fallback = _fallback_prefill()
    last = f"thinker prefill, turn {len(prefill)}"
    rows.append(Row("duplex", c, "thinker prefill, turn 1", prefill[0], "tokens"))
    rows.append(Row("duplex", c, last, prefill[-1], "tokens", fallback[-1], "fallback"))
    rows.append(Row("duplex", c, f"fallback: {last}", fallback[-1], "tokens"))
    logger.info("%s: thinker prefill per turn %s", PIPELINE, prefill)
    return rows
