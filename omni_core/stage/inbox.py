"""``LoopInbox``: threads hand work to one event loop with one wake-up per loop turn, both ways.

This module is omni-core's one thread → loop hand-off layer: every crossing into an event loop
from another thread goes through a loop's inbox, either :meth:`LoopInbox.post` (a producer that
waits for its turn: engine threads of in-process stage clients) or :func:`hand_off` (fire and
forget: the emitter's batches into caller loops, the request inbox's wake-up of the orchestrator
loop, a stream's thread-safe push, a full queue's waiters, a python stage's generator thread).
Crossings into one loop are therefore delivered in the order they were made, whoever made them.

For in-process stage clients whose engines run on threads of their own (one per replica, several
stages in one process). Handing each batch over with ``loop.call_soon_threadsafe`` and waking the
engine thread once it was taken costs the loop's thread a kernel wake-up per batch (a futex wake,
and often being preempted by the thread it woke); with many replicas of small batches that is most
of the orchestrator's time per output. An inbox is shared by every client on one loop:

- ``post(deliver, item)`` (any thread) queues ``deliver(item)`` to run on the loop. Only the first
  post after a drain schedules the drain (one ``call_soon_threadsafe``); later posts ride along.
- The drain (one loop callback) runs every queued ``deliver`` in posting order, then opens the
  :class:`Turn` those posts returned: one futex wake in the loop's thread per turn, whatever the
  number of waiting threads. A thread woken through a turn lets the next waiter through itself
  (a turnstile), so the other wake-ups are paid by the producing threads, not the loop.

A stage client gets the inbox of its loop with ``LoopInbox.of(asyncio.get_running_loop())`` in
``start()`` and calls its :class:`~omni_core.stage.client.OutputSink` from ``deliver``, which runs
in a loop callback of the inbox's, as a pushing client must. Items of one poster are delivered in
the order it posted them; an exception raised by one ``deliver`` goes to the loop's exception
handler and the others still run. If the loop closes with posts not delivered, their turns open
reporting it (``Turn.wait`` returns False) and later posts raise :class:`InboxClosed`: nothing is
dropped without its poster learning it.
"""

from __future__ import annotations

import _thread
import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

# How often a thread waiting on a turn checks that the loop did not close (the drain of a loop
# closed without running it never comes). Only threads whose turn has not come yet poll.
POLL_S = 1.0


class InboxClosed(RuntimeError):
    """The inbox's event loop is closed (or gone): nothing posted now can be delivered."""


def hand_off(loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None], item: Any) -> None:
    """Run ``deliver(item)`` on ``loop``'s thread at its inbox's next drain (fire and forget).

    Any thread (the loop's own too). Raises :class:`InboxClosed` (a ``RuntimeError``, as
    ``call_soon_threadsafe`` raises) when the loop is closed."""
    LoopInbox.of(loop).post(deliver, item)


class Turn:
    """The loop turn that delivers a set of posts; producer threads wait on it.

    ``wait()`` (any thread but the loop's) returns True once every post of the turn was delivered,
    False if the loop closed before that. Waiters pass one at a time: the drain releases the first
    and each releases the next, so the loop's thread pays one wake-up however many wait.
    """

    __slots__ = ("_gate", "_inbox", "delivered")

    def __init__(self, inbox: LoopInbox) -> None:
        self._inbox = inbox
        self._gate = _thread.allocate_lock()
        self._gate.acquire()  # closed until the turn ran
        self.delivered: bool | None = None  # set when it opens

    def wait(self) -> bool:
        """Block until the turn ran (True) or its loop closed without running it (False)."""
        gate = self._gate
        while not gate.acquire(timeout=POLL_S):
            if self._inbox._loop_closed():
                self._inbox._abandon()  # opens this turn (and any later one) undelivered
        gate.release()  # the turnstile: let the next waiter through
        return bool(self.delivered)

    def _open(self, delivered: bool) -> None:
        """Open the gate once (the drain, or the inbox giving up on a closed loop)."""
        if self.delivered is None:
            self.delivered = delivered
            self._gate.release()


class LoopInbox:
    """Every in-process client's hand-over to one event loop (see the module docstring).

    Thread-safe: ``post`` from any thread; the drain runs on the loop. ``of(loop)`` returns the
    loop's single inbox, so all clients on it share one drain per turn.
    """

    __slots__ = ("__weakref__", "_armed", "_closed", "_items", "_lock", "_loop", "_turn")

    _registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = (
        weakref.WeakKeyDictionary()
    )
    _registry_lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # a weak reference: the registry's values must not keep their keys (loops) alive
        self._loop = weakref.ref(loop)
        self._lock = _thread.allocate_lock()
        self._items: list[tuple[Callable[[Any], None], Any]] = []
        self._turn = Turn(self)
        self._armed = False  # a drain is scheduled and has not swapped the items out yet
        self._closed = False

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopInbox:
        """The inbox of ``loop``, created on first use (any thread)."""
        inbox = cls._registry.get(loop)
        if inbox is None:
            with cls._registry_lock:
                inbox = cls._registry.get(loop)
                if inbox is None:
                    inbox = cls._registry[loop] = cls(loop)
        return inbox

    # --- producer threads ---------------------------------------------------------------------
    def post(self, deliver: Callable[[Any], None], item: Any) -> Turn:
        """Queue ``deliver(item)`` for the loop's next drain; return the turn that runs it.

        Any thread. Raises :class:`InboxClosed` when the loop is closed. Waiting on the returned
        turn from the loop's own thread would deadlock: the loop thread never waits.
        """
        with self._lock:
            if self._closed:
                raise InboxClosed("the event loop is closed")
            self._items.append((deliver, item))
            turn = self._turn
            if self._armed:
                return turn
            self._armed = True
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError as exc:  # closed: nothing posted to this turn can be delivered
            self._abandon()
            raise InboxClosed(str(exc)) from exc
        return turn

    # --- the loop -----------------------------------------------------------------------------
    def _drain(self) -> None:
        """Deliver everything posted since the last drain, in order; then open its turn."""
        with self._lock:
            items, self._items = self._items, []
            turn, self._turn = self._turn, Turn(self)
            self._armed = False
        delivered = False
        try:
            for deliver, item in items:
                try:
                    deliver(item)
                except Exception as exc:  # one client's bug must not starve the others
                    self._report(exc, deliver)
            delivered = True
        finally:  # a BaseException (the loop is going down): the turn opens undelivered
            turn._open(delivered)

    def flush(self) -> None:
        """Deliver what was posted so far, now (on the loop's thread): a client's shutdown may
        call it so that batches handed over before it are taken before it reports its end."""
        self._drain()

    def _report(self, exc: Exception, deliver: Callable[[Any], None]) -> None:
        loop = self._loop()
        context = {"message": f"LoopInbox delivery {deliver!r} failed", "exception": exc}
        if loop is not None:
            loop.call_exception_handler(context)
        else:
            logger.error("%s", context["message"], exc_info=exc)

    # --- closing ------------------------------------------------------------------------------
    def _loop_closed(self) -> bool:
        loop = self._loop()
        return loop is None or loop.is_closed()

    def _abandon(self) -> None:
        """The loop closed with posts not delivered: open their turn undelivered, refuse more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            items, self._items = self._items, []
            turn = self._turn
        if items:
            logger.warning("event loop closed with %d hand-over(s) not delivered", len(items))
        turn._open(False)
