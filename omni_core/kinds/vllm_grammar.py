"""Structured-output grammars of a ``vllm`` stage: compiled off the path other requests wait on,
and refused (a 400) when they admit no output.

vLLM 0.32 compiles each request's grammar on a ``ThreadPoolExecutor`` of ``(cpus + 1) // 2``
threads (one on a 2-core machine) and never cancels that work: an aborted request's compile
runs to its end, and every later structured-output request (even ``json_object``, whose grammar
is cached) queues behind it. :class:`GrammarPool` replaces that executor
(:func:`install`): as many threads as vLLM's, and when a request is aborted (:meth:`prune`) its
queued compile is cancelled, and a compile already running is left to finish on its own thread
while a fresh thread takes over the queue (at most ``spare`` such abandoned compiles at once;
each is short, as :mod:`omni_core.grammar` bounds what one request may compile). Nothing can
stop xgrammar's native compile midway; this keeps it from blocking anyone. Specs of at most
:data:`SMALL_CHARS` characters (``json_object``, most schemas) compile on a lane of their own,
so they never queue behind a large compile, abandoned or live; large compiles run at a lower
CPU priority (nice +:data:`NICE`, xgrammar's helper threads included; an abandoned one at 19)
than the engine's thread, so they take the CPU from nobody's generation.

A grammar that compiles but admits no output (no first token: the JSON schema
``{"$ref": "#"}``) made vLLM answer one rejected token and ``finish_reason: "error"``; the pool
fails its compile instead (:class:`~omni_core.grammar.GrammarError`, kept in :attr:`failures`
for the stage to report as a 400).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from omni_core.grammar import GrammarError

logger = logging.getLogger(__name__)

MAX_FAILURES = 256  # compile failures kept for their requests' outputs (oldest dropped)


@dataclass
class _Job:
    request_id: str | None
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def check_admits_output(grammar: Any) -> None:
    """Raise :class:`GrammarError` when an xgrammar grammar allows no first token and cannot end
    either (it matches no string). Other backends' grammars pass unchecked."""
    matcher = getattr(grammar, "matcher", None)
    vocab_size = getattr(grammar, "vocab_size", None)
    if matcher is None or not isinstance(vocab_size, int):
        return
    import xgrammar as xgr

    mask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(mask)
    if not bool(mask.any()) and not matcher.is_terminated():
        raise GrammarError(
            "the grammar admits no output: no token can start it (e.g. a JSON schema that "
            'refers only to itself, {"$ref": "#"})'
        )


class GrammarPool:
    """An executor in place of vLLM's grammar-compile one (``submit`` / ``shutdown``).

    ``workers`` threads take the queue; :meth:`prune` abandons the compiles of requests that are
    gone. With ``small_chars``, specs of at most that many characters (``json_object``, a
    typical schema: milliseconds) have a lane of their own, one thread: they never wait behind
    a large compile, abandoned or not. ``failures``: request id -> why its compile failed (the
    last :data:`MAX_FAILURES`).
    """

    def __init__(
        self, workers: int, spare: int = 2, small_chars: int | None = None, nice: int = 0
    ) -> None:
        self.workers = max(1, workers)
        self.spare = max(0, spare)
        self.nice = nice
        self.small_chars = small_chars
        self.small = GrammarPool(1, 0) if small_chars is not None else None
        self._cv = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._threads: set[threading.Thread] = set()  # serving the queue
        self._orphans: set[threading.Thread] = set()  # finishing an abandoned compile, then exit
        self._running: dict[threading.Thread, _Job] = {}
        self._closed = False
        self.failures: OrderedDict[str, GrammarError] = OrderedDict()
        self.cancelled = 0  # queued compiles of gone requests, never started
        self.abandoned = 0  # running compiles of gone requests, left to their own thread

    # --- the executor interface vLLM uses ------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.small is not None and _spec_chars(args) <= (self.small_chars or 0):
            return self.small.submit(fn, *args, **kwargs)
        request_id = getattr(args[0], "request_id", None) if args else None
        future: Future[Any] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append(_Job(request_id, future, fn, args, kwargs))
            self._grow()
            self._cv.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self.small is not None:
            self.small.shutdown(wait, cancel_futures=cancel_futures)
        with self._cv:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft().future.cancel()
            threads = list(self._threads | self._orphans)
            self._cv.notify_all()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    # --- abandoning ------------------------------------------------------------------------------
    def prune(self, live: Iterable[str]) -> None:
        """Abandon the compiles of requests not in ``live`` (the engine's request ids): a queued
        one is cancelled, a running one finishes on its own thread (up to ``spare`` at once) and
        a new thread takes its place."""
        alive = set(live)
        if self.small is not None:
            self.small.prune(alive)
        with self._cv:
            kept: deque[_Job] = deque()
            for job in self._queue:
                if job.request_id is not None and job.request_id not in alive:
                    job.future.cancel()
                    self.cancelled += 1
                else:
                    kept.append(job)
            self._queue = kept
            for thread, job in list(self._running.items()):
                gone = job.request_id is not None and job.request_id not in alive
                if gone and thread in self._threads and len(self._orphans) < self.spare:
                    self._threads.discard(thread)
                    self._orphans.add(thread)
                    self.abandoned += 1
                    _lower_priority(thread.native_id, 19)  # nobody waits for it any more
            self._grow()
            self._cv.notify_all()

    def take_failure(self, request_id: str) -> GrammarError | None:
        """Why the compile of ``request_id`` (or of a request vLLM derived from it: its internal
        id carries a suffix, ``n`` > 1 a prefix) failed, once."""
        if self.small is not None:
            found = self.small.take_failure(request_id)
            if found is not None:
                return found
        with self._cv:
            for key in list(self.failures):
                if key == request_id or request_id in key:
                    return self.failures.pop(key)
        return None

    @property
    def busy(self) -> int:
        """Compiles running now (abandoned ones included)."""
        with self._cv:
            return len(self._running) + (self.small.busy if self.small is not None else 0)

    # --- threads ---------------------------------------------------------------------------------
    def _grow(self) -> None:
        while len(self._threads) < self.workers and not self._closed:
            thread = threading.Thread(target=self._serve, name="omni-grammar", daemon=True)
            self._threads.add(thread)
            thread.start()

    def _serve(self) -> None:
        me = threading.current_thread()
        if self.nice:  # xgrammar's compile threads, started from this one, inherit it
            _lower_priority(me.native_id, self.nice, relative=True)
        while True:
            with self._cv:
                while not self._queue and not self._closed and me in self._threads:
                    self._cv.wait()
                if me not in self._threads or not self._queue:
                    self._threads.discard(me)
                    return
                job = self._queue.popleft()
                if not job.future.set_running_or_notify_cancel():
                    continue
                self._running[me] = job
            self._run(job)
            with self._cv:
                self._running.pop(me, None)
                if me in self._orphans:
                    self._orphans.discard(me)
                    return

    def _run(self, job: _Job) -> None:
        try:
            grammar = job.fn(*job.args, **job.kwargs)
            check_admits_output(grammar)
        except GrammarError as exc:
            self._failed(job, exc)
            job.future.set_exception(exc)
        except BaseException as exc:  # vLLM's compile error: the future carries it to vLLM
            self._failed(job, GrammarError(f"the grammar does not compile: {exc}"))
            job.future.set_exception(exc)
        else:
            job.future.set_result(grammar)

    def _failed(self, job: _Job, exc: GrammarError) -> None:
        if job.request_id is None:
            return
        with self._cv:
            self.failures[job.request_id] = exc
            while len(self.failures) > MAX_FAILURES:
                self.failures.popitem(last=False)


def _lower_priority(tid: int | None, nice: int, relative: bool = False) -> None:
    """Raise thread ``tid``'s nice value (Linux: per thread) to ``nice`` (or by it)."""
    if tid is None or not hasattr(os, "setpriority"):
        return
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, max(now, now + nice if relative else nice)))
    except OSError:  # the thread ended already, or no such thread here
        pass


def _spec_chars(args: tuple[Any, ...]) -> int:
    """The length of the spec a vLLM compile job compiles (its request's structured-output key;
    unknown: as large as can be)."""
    try:
        return len(args[0].structured_output_request.structured_output_key[1])
    except (AttributeError, IndexError, TypeError):
        return 1 << 62


SMALL_CHARS = 4096  # specs this short compile in milliseconds: their own lane
NICE = 10  # large compiles run this much nicer than the engine's thread (the model's steps)


def install(
    manager: Any, spare: int = 2, small_chars: int | None = SMALL_CHARS
) -> GrammarPool | None:
    """Put a :class:`GrammarPool` (as many threads as vLLM's executor) in place of the
    executor of vLLM's ``StructuredOutputManager``; None when it has none (no tokenizer).
    vLLM's own log of a failed compile (a traceback) is left out: the stage logs each failure
    once, as the request's 400."""
    old = getattr(manager, "executor", None)
    if old is None:
        return None
    pool = GrammarPool(getattr(old, "_max_workers", 1), spare, small_chars, NICE)
    manager.executor = pool
    old.shutdown(wait=False)
    logging.getLogger("vllm.v1.structured_output").setLevel(logging.CRITICAL)
    return pool
