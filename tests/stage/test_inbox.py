"""``LoopInbox``: hand-overs from threads are delivered on the loop in posting order, many per
loop turn, their posters released together; one failing delivery spares the others; each loop
has its own inbox; a closed loop is reported, never silently dropped."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from omni_core.stage import inbox as inbox_module
from omni_core.stage.inbox import InboxClosed, LoopInbox, Turn


class Drains:
    """Counts the inbox drains (loop callbacks) of a test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        drain = LoopInbox._drain

        def counted(inbox: LoopInbox) -> None:
            self.count += 1
            drain(inbox)

        monkeypatch.setattr(LoopInbox, "_drain", counted)


def in_thread(fn: Any) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_posts_made_while_the_loop_is_busy_are_delivered_in_one_turn_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drains = Drains(monkeypatch)
    loop = asyncio.new_event_loop()
    try:
        inbox = LoopInbox.of(loop)
        got: list[tuple[str, int]] = []
        on_loop: set[int] = set()

        def deliver(item: tuple[str, int]) -> None:
            on_loop.add(threading.get_ident())
            got.append(item)

        def producer(name: str) -> None:
            for i in range(50):
                inbox.post(deliver, (name, i))

        for thread in [in_thread(lambda n=n: producer(n)) for n in "abcd"]:
            thread.join()
        loop.run_until_complete(asyncio.sleep(0))  # the loop was busy: one turn takes them all
        assert drains.count == 1 and len(got) == 200
        for name in "abcd":  # each producer's items in the order it posted them
            assert [i for n, i in got if n == name] == list(range(50))
        assert on_loop == {threading.get_ident()}  # delivered on the loop's thread
    finally:
        loop.close()


def test_producers_wait_until_their_turn_ran_and_are_released_together() -> None:
    loop = asyncio.new_event_loop()
    try:
        inbox = LoopInbox.of(loop)
        got: list[int] = []
        turns: list[Turn] = []
        released: list[bool] = []
        posted = threading.Barrier(9)

        def producer(i: int) -> None:
            turns.append(inbox.post(got.append, i))
            posted.wait()
            released.append(turns[-1].wait())

        threads = [in_thread(lambda i=i: producer(i)) for i in range(8)]
        posted.wait()
        assert released == []  # nobody passes before the loop took the batches
        loop.run_until_complete(asyncio.sleep(0))
        for thread in threads:
            thread.join(5)
        assert released == [True] * 8 and sorted(got) == list(range(8))
        assert len({id(turn) for turn in turns}) == 1  # one turn for all eight
    finally:
        loop.close()


def test_a_failing_delivery_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.new_event_loop()
    try:
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        inbox = LoopInbox.of(loop)
        got: list[str] = []

        def broken(item: str) -> None:
            raise ValueError(item)

        turn = inbox.post(got.append, "before")
        inbox.post(broken, "boom")
        inbox.post(got.append, "after")
        loop.run_until_complete(asyncio.sleep(0))
        assert got == ["before", "after"]
        assert [type(e["exception"]) for e in errors] == [ValueError]
        assert turn.wait() is True
        inbox.post(got.append, "later")  # the inbox keeps serving
        loop.run_until_complete(asyncio.sleep(0))
        assert got[-1] == "later"
    finally:
        loop.close()


def test_each_loop_has_its_own_inbox_and_delivers_on_its_own_thread() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    idents: list[int] = []
    ready = threading.Barrier(3)

    def run() -> None:
        loop = asyncio.new_event_loop()
        loops.append(loop)
        idents.append(threading.get_ident())
        ready.wait()
        loop.run_forever()
        loop.close()

    threads = [in_thread(run), in_thread(run)]
    ready.wait()
    try:
        first, second = (LoopInbox.of(loop) for loop in loops)
        assert first is not second and LoopInbox.of(loops[0]) is first
        seen: dict[str, set[int]] = {"first": set(), "second": set()}

        def record(name: str) -> None:
            seen[name].add(threading.get_ident())

        for _ in range(20):  # several turns each, waited on from this (a producer) thread
            assert first.post(record, "first").wait() and second.post(record, "second").wait()
        assert seen == {"first": {idents[0]}, "second": {idents[1]}}
    finally:
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)
        for thread in threads:
            thread.join(5)


def test_a_loop_closed_before_its_turn_ran_reports_it_and_refuses_posts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inbox_module, "POLL_S", 0.01)
    loop = asyncio.new_event_loop()
    inbox = LoopInbox.of(loop)
    got: list[int] = []
    turn = inbox.post(got.append, 1)
    loop.close()  # the scheduled drain never runs
    assert turn.wait() is False and got == []
    with pytest.raises(InboxClosed):
        inbox.post(got.append, 2)


def test_posting_to_a_closed_loop_raises() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(InboxClosed):
        LoopInbox.of(loop).post(print, "never")


def test_flush_delivers_what_was_posted_before_a_shutdown() -> None:
    loop = asyncio.new_event_loop()
    try:
        inbox = LoopInbox.of(loop)
        got: list[int] = []
        turns = [inbox.post(got.append, i) for i in range(3)]
        inbox.flush()  # e.g. from a client's shutdown, on the loop's thread
        assert got == [0, 1, 2] and all(turn.wait() for turn in turns)
        loop.run_until_complete(asyncio.sleep(0))  # the drain still scheduled finds nothing
        assert got == [0, 1, 2]
    finally:
        loop.close()
