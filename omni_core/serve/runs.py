"""One admitted request of ``omni serve``: the admission bound, the engine's outputs turned into
HTTP errors, and its event stream.

A request ends, and its in-flight slot is freed, when it finishes, when its client goes away
(one INFO line, the request aborted in the engine), when its client stops reading (the guard's
write timeout) or when the drain's grace period expires (a streamed one then ends with an error
event and ``data: [DONE]``; a whole one is a 503).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from omni_core.chat import RenderedPrompt
from omni_core.errors import EngineDeadError, RequestError
from omni_core.outputs import OmniRequestOutput
from omni_core.serve import streams
from omni_core.serve.connections import Drain
from omni_core.serve.errors import ApiError, from_error_info
from omni_core.serve.guard import Message, Receive, Scope, Send

logger = logging.getLogger(__name__)


class Admission:
    """Bounded in-flight requests: past the bound, callers get 429 with ``Retry-After``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0

    def enter(self) -> None:
        if self.inflight >= self.limit:
            raise ApiError(
                429,
                f"the server is at its limit of {self.limit} in-flight requests",
                "rate_limit_exceeded",
                code="too_many_requests",
                headers={"Retry-After": "1"},
            )
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1

    def check_fits(self, runs: int, param: str) -> None:
        """A request of ``runs`` runs (one per prompt) that could never be admitted, even on an
        idle server: a 400 naming the field and the limit, not a 429 a client would retry."""
        if runs > self.limit:
            raise ApiError(
                400,
                f"'{param}': {runs} prompts; each runs as one request and this server runs at "
                f"most {self.limit} at once (--max-inflight, OMNI_MAX_INFLIGHT): send at most "
                f"{self.limit} per request",
                param=param,
                code="too_many_prompts",
            )


class ClientGone(Exception):
    """The client disconnected before its (whole) response: nothing left to answer."""


def shutdown_error(drain: Drain) -> ApiError:
    return ApiError(
        503,
        f"the server shut down before this request finished (its grace period of "
        f"{drain.grace_s:g} s expired)",
        "service_unavailable",
        code="server_shutdown",
    )


class Run:
    """One admitted request: its outputs, errors turned into HTTP errors, admission released
    once it ends (also when the client goes away, which aborts it)."""

    def __init__(
        self,
        request: Request,
        engine: Any,
        admission: Admission,
        rendered: RenderedPrompt,
        params: Any,
        modalities: list[str],
        drain: Drain,
    ) -> None:
        self.request = request
        self.drain = drain
        self.admission: Admission | None = admission
        self.siblings: list[Run] = []  # runs of the same request closed with this one
        admission.enter()
        self.gen = _generate(engine, rendered, params, modalities)  # keeps the chat

    async def start(self) -> OmniRequestOutput:
        """The first output (a failure before it is an HTTP error, not a 200 then an error)."""
        try:
            return await self.gen.__anext__()
        except BaseException:
            await self.close()
            raise

    async def outputs(self, first: OmniRequestOutput) -> AsyncIterator[OmniRequestOutput]:
        yield first
        async for out in self.gen:
            yield out

    async def sse(self, chunks: AsyncIterator[str]) -> AsyncGenerator[str, None]:
        """The chunks; an error after the 200 is an error event, and the stream still ends with
        ``data: [DONE]`` (vLLM's server does the same), a bug's included (logged, a 500 event)."""
        try:
            async for chunk in chunks:
                yield chunk
        except ApiError as exc:
            yield streams.error_event(exc) + "data: [DONE]\n\n"
        except Exception as exc:
            logger.exception("%s: the stream failed", self.request.url.path)
            error = ApiError(500, f"{type(exc).__name__}: {exc}", "server_error")
            yield streams.error_event(error) + "data: [DONE]\n\n"
        finally:
            await self.close()

    def stream(self, chunks: AsyncIterator[str]) -> EventStream:
        return EventStream(self, self.sse(chunks))

    async def collect(self) -> list[OmniRequestOutput]:
        """Run to the end; a client disconnect cancels it (which aborts the request), and so
        does the drain's cut (a 503)."""

        async def run() -> list[OmniRequestOutput]:
            return [o async for o in self.gen]

        work = asyncio.ensure_future(run())
        watch = asyncio.ensure_future(_disconnected(self.request.receive))
        cut = asyncio.ensure_future(self.drain.cut.wait())
        try:
            await asyncio.wait({work, watch, cut}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            cut.cancel()
            if not work.done():
                work.cancel()  # closing the generator aborts the request in the engine
            try:
                await asyncio.wait({work})
            finally:
                await self.close()
        if work.cancelled():
            if watch.done() and not watch.cancelled():
                raise ClientGone()
            raise shutdown_error(self.drain)
        return work.result()

    async def close(self) -> None:
        try:
            if self.admission is not None:
                self.admission.leave()
                self.admission = None  # left once, however many paths close the run
                await self.gen.aclose()
        finally:
            for sibling in self.siblings:
                await sibling.close()


class EventStream(StreamingResponse):
    """A run's server-sent events. Ends early when the client goes away (one INFO line, the run
    aborted) or when the drain's grace period expires (an error event and ``data: [DONE]``)."""

    def __init__(self, run: Run, chunks: AsyncGenerator[str, None]) -> None:
        super().__init__(chunks, media_type="text/event-stream")
        self.run = run
        self.chunks = chunks
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.ensure_future(self._write(send))
        watcher = asyncio.ensure_future(_disconnected(receive))
        cut = asyncio.ensure_future(self.run.drain.cut.wait())
        try:
            await asyncio.wait({writer, watcher, cut}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():
                writer.result()
                return
            writer.cancel()
            await asyncio.wait({writer})
            if watcher.done():
                logger.info(
                    "%s: the client went away mid-stream; its request was aborted", scope["path"]
                )
                return
            logger.warning(
                "%s: the grace period expired; ending the stream with an error", scope["path"]
            )
            await self._tail(send)
        finally:
            watcher.cancel()
            cut.cancel()
            if not writer.done():
                writer.cancel()
                await asyncio.wait({writer})
            if not writer.cancelled():
                writer.exception()  # retrieved: raised above, or moot once the stream is cut
            await self.chunks.aclose()  # closes the run: its slot, the engine's request

    async def _write(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        self.started = True
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _tail(self, send: Send) -> None:
        if not self.started:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        tail = streams.error_event(shutdown_error(self.run.drain)) + "data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail.encode(), "more_body": False})


def start_runs(
    request: Request,
    engine: Any,
    admission: Admission,
    rendered: list[RenderedPrompt],
    params: Any,
    drain: Drain,
) -> list[Run]:
    """A text run per prompt of one request, each admitted (k prompts hold k slots)."""
    runs: list[Run] = []
    try:
        for prompt in rendered:
            runs.append(Run(request, engine, admission, prompt, params, ["text"], drain))
    except BaseException:
        for run in runs:  # not started yet: their slots only
            if run.admission is not None:
                run.admission.leave()
                run.admission = None
        raise
    return runs


async def all_of(runs: list[Run], step: Callable[[Run], Awaitable[Any]]) -> list[Any]:
    """``step(run)`` of every run at once; the first failure cancels the others and closes every
    run (which aborts them), then is raised."""
    if len(runs) == 1:
        return [await step(runs[0])]
    tasks = [asyncio.ensure_future(step(r)) for r in runs]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    failed = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
    if failed or any(t.cancelled() for t in tasks):
        for run in runs:
            await run.close()
        if failed:
            raise failed[0]
        raise asyncio.CancelledError()
    return [t.result() for t in tasks]


async def _disconnected(receive: Receive) -> None:
    message: Message = {}
    while message.get("type") != "http.disconnect":
        message = await receive()


async def _generate(
    engine: Any, prompt: Any, params: Any, modalities: list[str]
) -> AsyncGenerator[OmniRequestOutput, None]:
    try:
        async for out in engine.generate(prompt, sampling_params=params, modalities=modalities):
            if out.error is not None:
                raise from_error_info(out.error)
            yield out
    except RequestError as exc:
        raise ApiError(exc.status_code, str(exc), param=exc.param) from None
    except EngineDeadError as exc:
        raise ApiError(503, str(exc), "service_unavailable", code="engine_dead") from None
