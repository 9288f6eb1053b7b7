"""The hand-wired baseline of ``omni bench pipeline``: tiny-omni's three engines chained the way a
user would without omni-core.

Each engine runs in its own process (``multiprocessing``, spawned) with a plain loop: take every
request waiting on its input pipe, step the engine, and send each finished request's tokens down
the next pipe (forwarding on finish). The vocoder voices a request's codes in one go and sends the
audio back to the driver. Pipes pickle what they carry, as a user's would.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import threading
from multiprocessing.connection import Connection
from typing import Any

from omni_core.bench.orchestration import CheckFailed

WATCH_S = 0.5  # how often the driver checks that the chain's processes still run

THREAD_ENV = {  # as the vllm kind's stage processes get (omni_core.kinds.vllm_kind.thread_env)
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


def _quiet() -> None:
    """Engine libraries' start-up chatter off the bench's table (a user would log it)."""
    import warnings

    os.environ.update(THREAD_ENV)
    warnings.simplefilter("ignore")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)


def llm_loop(
    model: str, args: dict[str, Any], tokens: int, inbox: Connection, out: Connection
) -> None:
    """A vLLM engine between two pipes: ``(id, prompt ids)`` in, ``(id, generated ids)`` out."""
    _quiet()
    import torch

    torch.set_num_threads(1)
    from omni_core.kinds import vllm_adapter as va

    engine = va.build_engine(model, enforce_eager=True, disable_log_stats=True, **args)
    params = va.VllmSamplingParams(
        max_tokens=tokens,
        temperature=0.8,
        seed=0,
        ignore_eos=True,
        output_kind=va.RequestOutputKind.FINAL_ONLY,
    )
    engine.add_request("warm", va.to_prompt([1, 2, 3]), params)
    while engine.has_unfinished_requests():
        engine.step()
    while True:
        busy = engine.has_unfinished_requests()
        if inbox.poll(0 if busy else None):
            message = inbox.recv()
            if message is None:
                out.send(None)
                return
            rid, prompt = message
            engine.add_request(rid, va.to_prompt(prompt), params)
            continue
        for ro in engine.step():
            if ro.finished:
                out.send((ro.request_id, list(ro.outputs[0].token_ids)))


def vocoder_loop(model: str, inbox: Connection, out: Connection) -> None:
    """The vocoder between two pipes: ``(id, codes)`` in, ``(id, audio)`` out."""
    _quiet()
    from omni_core.kinds.vocoder import VocoderEngine

    vocoder = VocoderEngine({"model": model, "threads": 1})
    vocoder.voice([1, 2], 0)
    while True:
        message = inbox.recv()
        if message is None:
            out.send(None)
            return
        rid, codes = message
        out.send((rid, vocoder.voice(codes, 0)))


class HandChain:
    """The driver's side: start the three processes, ``await chain.run(id, prompt)`` → audio."""

    def __init__(self, thinker: str, talker: str, vocoder: str, args: dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        to_thinker_r, self.to_thinker = ctx.Pipe(False)  # one-way
        to_talker_r, to_talker_w = ctx.Pipe(False)  # one-way
        to_vocoder_r, to_vocoder_w = ctx.Pipe(False)  # one-way
        self.results, results_w = ctx.Pipe(False)  # one-way
        self.procs = [
            ctx.Process(
                target=llm_loop, args=(thinker, args, 24, to_thinker_r, to_talker_w), daemon=True
            ),
            ctx.Process(
                target=llm_loop, args=(talker, args, 12, to_talker_r, to_vocoder_w), daemon=True
            ),
            ctx.Process(target=vocoder_loop, args=(vocoder, to_vocoder_r, results_w), daemon=True),
        ]
        for proc in self.procs:
            proc.start()
        # ready once a first request came back (the bench warms up with one)
        self.waiting: dict[str, asyncio.Future[Any]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.reader: threading.Thread | None = None
        self.closed = threading.Event()
        self.failure: CheckFailed | None = None
        threading.Thread(target=self._watch, daemon=True, name="chain-watchdog").start()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def _read(self) -> None:
        while True:
            try:
                message = self.results.recv()
            except EOFError:
                return
            if message is None:
                return
            rid, audio = message
            fut = self.waiting.pop(rid, None)
            if fut is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(fut.set_result, audio)

    def _watch(self) -> None:
        """A chain process that exits (its engine failed to load, it crashed) fails the requests
        waiting and every later one, instead of leaving the bench waiting forever."""
        while not self.closed.wait(WATCH_S):
            dead = [p for p in self.procs if p.exitcode is not None]
            if dead:
                names = ", ".join(f"{p.name} (exit code {p.exitcode})" for p in dead)
                self.failure = CheckFailed(f"hand-wired chain: process {names} exited")
                self._fail_waiting()
                return

    def _fail_waiting(self) -> None:
        failure = self.failure
        if failure is None:
            return
        for rid in list(self.waiting):
            fut = self.waiting.pop(rid, None)
            if fut is None:
                continue
            try:  # on the loop of the run that made it (an earlier run's may be closed)
                fut.get_loop().call_soon_threadsafe(_fail, fut, failure)
            except RuntimeError:
                pass  # that run is over: nobody waits on it

    async def run(self, rid: str, prompt: list[int]) -> Any:
        if self.failure is not None:
            raise self.failure
        self.loop = asyncio.get_running_loop()  # each asyncio.run of the bench has its own
        if self.reader is None:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        fut = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        if self.failure is not None:  # the watchdog may have failed the others meanwhile
            self._fail_waiting()
        self.to_thinker.send((rid, prompt))
        return await fut

    def close(self) -> None:
        self.closed.set()
        self.to_thinker.send(None)
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


def _fail(fut: asyncio.Future[Any], failure: CheckFailed) -> None:
    if not fut.done():
        fut.set_exception(failure)
