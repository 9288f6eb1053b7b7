"""Per-replica intake for stage clients that push their outputs (``set_output_sink``).

A pulling client is read by a reader task: every batch wakes that task, one more trip round the
event loop. A pushing client hands its batch to a :class:`ReplicaIntake` from a callback of its
own, and the intake routes it right there, on the hand-off's stack. Routing is a coroutine that
almost never suspends; when it does (an abort waiting for its acknowledgement, a forward to a busy
transport) the rest of it finishes as a task, and later batches of the same replica queue behind
it: outputs of one replica are routed in the order it produced them, as with a reader.

Clients whose engines run on threads of this process hand their batches over through the loop's
:class:`~omni_core.stage.inbox.LoopInbox`: every batch their threads handed over during one loop
turn is pushed from one callback, each into its own replica's intake, and the threads are released
together afterwards (one wake-up of the loop's thread per turn, not per batch).

The hand-stepped first step is kept because it pays: with routing always started as a task
instead, ``omni bench hop`` measured hop p50 ~2x and routing p50 ~2.7x the stepped figures, and
``throughput`` about a third fewer routed outputs/s (docs/benchmarks.md, "One hand-off layer").

The first step of a routing runs in the pushing callback, outside any task: seams and hooks on
that path must not need ``asyncio.current_task()`` (``asyncio.timeout()`` does; ``wait_for``
does not), or must move such work into a task of their own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from omni_core.errors import EngineDeadError
from omni_core.outputs import StageOutput

Routine = Coroutine[Any, Any, None]


class _Resume:
    """Awaiting it finishes ``coro``, whose first step already ran and yielded ``waiting``."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Routine, waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self.coro, self.waiting
        while True:
            try:
                sent = yield value  # the awaiting task waits on what the coroutine waits on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation or the awaited future's error
                try:
                    value = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    value = coro.send(sent)
                except StopIteration:
                    return


class ReplicaIntake:
    """The :class:`~omni_core.stage.client.OutputSink` the orchestrator gives one pushing client.

    ``route(outputs)`` and ``died(error)`` make the coroutines that route a batch or handle the
    replica's death; ``spawn`` runs a coroutine as an orchestrator task; ``fatal`` receives an
    unexpected exception (the orchestrator stops).
    """

    __slots__ = ("_died", "_fatal", "_queue", "_route", "_spawn", "_task", "label")

    def __init__(
        self,
        route: Callable[[list[StageOutput]], Routine],
        died: Callable[[EngineDeadError], Routine],
        spawn: Callable[[Routine, str], asyncio.Task[Any]],
        fatal: Callable[[BaseException], None],
        label: str,
    ) -> None:
        self._route = route
        self._died = died
        self._spawn = spawn
        self._fatal = fatal
        self._queue: deque[Routine] | None = None  # set while a routing is suspended
        self._task: asyncio.Task[None] | None = None  # the task finishing it
        self.label = label

    def push(self, outputs: list[StageOutput]) -> None:
        self._run(self._route(outputs))

    def dead(self, error: EngineDeadError) -> None:
        self._run(self._died(error))

    def _run(self, coro: Routine) -> None:
        if self._queue is not None:
            self._queue.append(coro)
            return
        try:
            waiting = coro.send(None)
        except StopIteration:
            return
        except BaseException as exc:
            self._fatal(exc)
            return
        self._queue = deque()
        self._task = self._spawn(self._finish(coro, waiting), self.label)
        self._task.add_done_callback(self._finished)

    async def _finish(self, coro: Routine, waiting: Any) -> None:
        try:
            await _Resume(coro, waiting)
            while self._queue:
                await self._queue.popleft()
        except asyncio.CancelledError:
            self._drop()
            # The orchestrator stopping cancels it (then this is ignored); anything else means
            # a routing was cancelled from inside: outputs would be lost, so it is fatal.
            self._fatal(RuntimeError(f"{self.label}: a routing was cancelled"))
            raise
        except BaseException:
            self._drop()
            raise
        self._queue = None  # in the step that saw it empty: nothing can slip in between
        self._task = None

    def _finished(self, task: asyncio.Task[None]) -> None:
        if task is self._task:  # cancelled before its first step: _finish never ran
            self._task = None
            self._drop()

    def _drop(self) -> None:
        """The orchestrator is stopping (or crashed): what waited behind will never run."""
        queue, self._queue = self._queue, None
        for left in queue or ():
            left.close()
