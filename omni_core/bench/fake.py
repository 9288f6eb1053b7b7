"""A zero-cost fake engine behind the real stage-client seam, for the orchestration benchmarks.

Per replica: a running set and an engine thread. One *step* emits one batch with one new token for
every running request (the T-th token finishes it); the batch crosses a thread boundary into the
orchestrator loop the way a real engine's output arrives; the next step happens only after the
orchestrator took the previous batch (at most one untaken batch per replica).

Batches cross through the loop's :class:`~omni_core.stage.inbox.LoopInbox`, shared by every
replica of every stage on that loop: the batches the replicas' threads hand over while the loop is
busy are pushed in one loop callback, and those threads are released together once it ran (one
wake-up of the orchestrator's thread per loop turn, not per batch).

With ``final_only``, a request whose ``StageRequest.stream_outputs`` is False (nobody reads its
deltas) gets one output at the end holding every token, as vLLM's ``FINAL_ONLY`` mode does.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput
from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import StageKind
from omni_core.stage.client import OutputSink, StageContext, StageRequest
from omni_core.stage.inbox import InboxClosed, LoopInbox

OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION


class FakeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: int = 16
    expect_prompt_len: int | None = None
    final_only: bool = False  # honour stream_outputs=False: one output at the end


class Probe:
    """Shared timestamps for the hop benchmark and correctness counters."""

    def __init__(self) -> None:
        self.handed: dict[tuple[str, int], int] = {}  # (request, stage) -> ns final output handed
        self.hops: list[int] = []
        self.landed: dict[int, int] = {}  # stage -> ns its last batch landed on the loop
        self.routing: list[int] = []  # ns from a batch landing to the next stage receiving
        self.bad_prompts = 0
        self.stream_outputs: dict[int, set[bool]] = {}  # stage -> stream_outputs it was asked


PROBE = Probe()


class FakeEngineClient:
    def __init__(self, stage_id: int, args: FakeArgs) -> None:
        self.stage_id = stage_id
        self.args = args
        # Wake-ups of the idle engine thread (``_idle``: nothing to step, or a pulled batch not
        # taken yet): one token per reason (a request, an abort, a taken batch, shutdown); the
        # thread re-checks its state after each, so extra tokens are harmless. Tokens are put only
        # while it is idle, so they do not pile up under load. A C queue: waking the thread costs
        # the orchestrator loop no Python-level lock dance.
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._idle = False
        self._pending: list[tuple[str, bool]] = []  # (request id, final output only)
        self._aborted: set[str] = set()
        self._taken = True
        self._closed = False
        self._batch: list[StageOutput] | None = None
        self._ready: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: LoopInbox | None = None
        self._thread: threading.Thread | None = None
        self._sink: OutputSink | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._inbox = LoopInbox.of(self._loop)
        self._ready = asyncio.Event()
        self._thread = threading.Thread(
            target=self._engine, daemon=True, name=f"fake-engine-{self.stage_id}"
        )
        self._thread.start()

    # --- engine thread ------------------------------------------------------------------------
    def _engine(self) -> None:
        running: dict[str, int] = {}
        quiet: set[str] = set()  # final output only
        tokens = self.args.tokens
        stage = self.stage_id
        handed = PROBE.handed
        deliver = self._deliver
        wait = self._wake.get
        assert self._inbox is not None
        post = self._inbox.post
        while True:
            if self._closed:
                return
            if not (self._taken and (self._pending or running)):
                self._idle = True  # then re-check: a request added meanwhile saw it set or not
                if not (self._closed or (self._taken and (self._pending or running))):
                    wait()
                self._idle = False
                continue
            # swap, do not clear: the loop thread may append meanwhile (to one list or the other)
            pending, self._pending = self._pending, []
            for rid, final_only in pending:
                running[rid] = 0
                if final_only:
                    quiet.add(rid)
            if self._aborted:
                aborted, self._aborted = self._aborted, set()
                for rid in aborted:
                    running.pop(rid, None)
                    quiet.discard(rid)
            self._taken = False
            batch = []
            for rid, count in list(running.items()):
                count += 1
                done = count >= tokens
                if rid not in quiet:
                    batch.append(
                        StageOutput(
                            request_id=rid,
                            token_ids=[count],
                            finished=done,
                            finish_reason="length" if done else None,
                        )
                    )
                elif done:
                    quiet.discard(rid)
                    batch.append(
                        StageOutput(
                            request_id=rid,
                            token_ids=list(range(1, count + 1)),
                            finished=True,
                            finish_reason="length",
                        )
                    )
                if done:
                    del running[rid]
                    handed[(rid, stage)] = time.perf_counter_ns()
                else:
                    running[rid] = count
            if not batch:
                self._taken = True
                continue
            try:
                turn = post(deliver, batch)
            except InboxClosed:
                return
            # Released with every other replica whose batch the same loop turn took. A pushed
            # batch is taken once delivered; a pulled one when get_outputs returned it (then
            # _taken is still False here and the loop wakes this thread again through _wake).
            if not turn.wait():
                return

    def _deliver(self, batch: list[StageOutput]) -> None:
        """The loop's inbox drain: push the batch (routed right here) or leave it for the reader."""
        PROBE.landed[self.stage_id] = time.perf_counter_ns()
        if self._sink is not None:
            self._sink.push(batch)
            self._taken = True  # the engine steps again once the inbox opens this turn
            return
        self._batch = batch
        assert self._ready is not None
        self._ready.set()

    def set_output_sink(self, sink: OutputSink) -> None:
        self._sink = sink

    # --- orchestrator loop --------------------------------------------------------------------
    async def add_request(self, request: StageRequest) -> None:
        if self.stage_id > 0:
            before = PROBE.handed.pop((request.request_id, self.stage_id - 1), None)
            if before is not None:
                now = time.perf_counter_ns()
                PROBE.hops.append(now - before)
                PROBE.routing.append(now - PROBE.landed[self.stage_id - 1])
        expected = self.args.expect_prompt_len
        if expected is not None and len(request.prompt) != expected:
            PROBE.bad_prompts += 1
        PROBE.stream_outputs.setdefault(self.stage_id, set()).add(request.stream_outputs)
        final_only = self.args.final_only and not request.stream_outputs
        self._pending.append((request.request_id, final_only))
        if self._idle:
            self._wake.put(None)

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError

    async def abort(self, request_ids: list[str]) -> None:
        self._aborted = self._aborted | set(request_ids)  # a new set: the engine may swap it
        if self._idle:
            self._wake.put(None)

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        raise NotImplementedError(method)

    async def get_outputs(self) -> list[StageOutput]:
        assert self._ready is not None
        while self._batch is None:
            if self._closed:
                raise EngineDeadError("fake engine closed")
            await self._ready.wait()
            self._ready.clear()
        batch, self._batch = self._batch, None
        # Wake the engine thread once this batch has been routed (the next loop callback), not
        # before: the wake-up is a futex syscall that would otherwise sit on every hop.
        assert self._loop is not None
        self._loop.call_soon(self._release)
        return batch

    def _release(self) -> None:
        self._taken = True
        if self._idle:
            self._wake.put(None)

    def is_healthy(self) -> bool:
        return not self._closed

    async def shutdown(self) -> None:
        self._closed = True
        self._wake.put(None)
        if self._ready is not None:
            self._ready.set()


def _factory(stage: Any, replica: int, context: StageContext) -> FakeEngineClient:
    return FakeEngineClient(stage.id, FakeArgs.model_validate(stage.engine_args))


@hookimpl
def omni_register_stage_kinds() -> list[StageKind]:
    return [StageKind("bench-fake", _factory, FakeArgs, "zero-cost threaded fake engine")]
