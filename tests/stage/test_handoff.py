"""One hand-off layer: every crossing into an event loop goes through that loop's ``LoopInbox``,
so crossings made by different producers (an engine thread's post, a stream's thread-safe push,
the emitter's batch, the request inbox's wake-up) are delivered in the order they were made."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from omni_core.engine.channel import RequestInbox, RequestStream
from omni_core.orchestrator.emit import Emitter
from omni_core.stage.inbox import InboxClosed, LoopInbox, hand_off


class Recording(RequestStream):
    def __init__(self, loop: asyncio.AbstractEventLoop, log: list[Any]) -> None:
        super().__init__("r", loop)
        self.log = log

    def push(self, item: Any) -> None:
        self.log.append(item)


async def in_thread(fn: Any) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    await asyncio.to_thread(thread.join)


async def test_crossings_of_different_kinds_arrive_in_the_order_they_were_made() -> None:
    loop = asyncio.get_running_loop()
    log: list[Any] = []
    stream = Recording(loop, log)
    emitter = Emitter()  # no loop of its own: a flush hands over at once
    inbox = LoopInbox.of(loop)

    def produce() -> None:
        inbox.post(log.append, "post 1")  # schedules the drain
        stream.push_threadsafe("stream push")  # rides along: before "post 2"
        emitter.emit(stream, "emitted")
        emitter.flush()
        inbox.post(log.append, "post 2")
        hand_off(loop, log.append, "hand-off")

    await in_thread(produce)
    for _ in range(3):
        await asyncio.sleep(0)
    assert log == ["post 1", "stream push", "emitted", "post 2", "hand-off"]


async def test_the_request_inbox_still_wakes_its_loop_after_an_inbox_post() -> None:
    loop = asyncio.get_running_loop()
    log: list[Any] = []
    requests = RequestInbox(8)
    requests.bind()
    waiter = asyncio.ensure_future(requests.get_batch())
    await asyncio.sleep(0)

    def produce() -> None:
        LoopInbox.of(loop).post(log.append, "before")
        requests.put("msg")  # its wake-up is delivered after "before", in the same drain

    await in_thread(produce)
    assert await asyncio.wait_for(waiter, 5) == ["msg"]
    assert log == ["before"]


def test_a_hand_off_to_a_closed_loop_raises_inbox_closed() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    try:
        hand_off(loop, print, "x")
    except InboxClosed as exc:
        assert isinstance(exc, RuntimeError)
    else:
        raise AssertionError("no InboxClosed")
