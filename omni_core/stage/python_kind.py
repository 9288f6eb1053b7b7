"""The ``python`` stage kind: the engine is a user callable given by dotted path.

The callable gets ``(prompt, params)`` and returns one whole result, or is a sync/async generator
yielding results one by one (streaming). A ``str`` result becomes ``text``, a list of ints
``token_ids``, anything else ``payload``. Each yielded item is emitted as soon as it is yielded
(the generator is not asked for the next one first); when the generator returns, one empty output
with ``finished=True`` ends the request (unless the generator yielded a ``StageOutput`` with
``finished=True`` itself, which ends it there). Sync callables (and a sync generator's
iteration) run in a worker thread, never on the orchestrator loop; ``async`` callables run on that
loop, so they must not block it (the loop-lag watchdog warns naming the stage when they do).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from omni_core.outputs import ErrorInfo, StageOutput
from omni_core.stage.client import StageContext, StageRequest
from omni_core.stage.inbox import hand_off
from omni_core.stage.local import LocalStageClient

_END = object()


class PythonStageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    callable: str = Field(
        description="dotted path of the callable, `pkg.mod:func` or `pkg.mod.func`; it gets "
        "`(prompt, params, **kwargs)`"
    )
    kwargs: dict[str, Any] = Field(default={}, description="extra keyword arguments of every call")

    @field_validator("callable")
    @classmethod
    def _importable(cls, value: str, info: ValidationInfo) -> str:
        if (info.context or {}).get("import_code", True):
            import_callable(value)
        else:  # `omni config validate`: located, not imported (no code of the file's runs)
            from omni_core.config.resolve import module_locatable

            module_name, sep, _ = value.partition(":")
            if not sep:
                module_name = value.rpartition(".")[0]
            if not module_name or not module_locatable(module_name):
                raise ValueError(f"cannot import '{value}': no module named '{module_name}'")
        return value


def import_callable(path: str) -> Callable[..., Any]:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"cannot import '{path}': {exc}") from None
    if not callable(func):
        raise ValueError(f"'{path}' is not callable")
    return func  # type: ignore[no-any-return,unused-ignore]


def _as_output(request_id: str, item: Any) -> StageOutput:
    if isinstance(item, StageOutput):
        item.request_id = request_id
        return item
    if isinstance(item, str):
        return StageOutput(request_id=request_id, text=item)
    if isinstance(item, list) and all(isinstance(t, int) for t in item):
        return StageOutput(request_id=request_id, token_ids=item)
    return StageOutput(request_id=request_id, payload=item)


def _runs_on_loop(func: Callable[..., Any]) -> bool:
    """An ``async def`` function or async generator function (also as a callable object's
    ``__call__``): called on the orchestrator loop. Anything else runs in a worker thread."""
    call = getattr(func, "__call__", None)  # noqa: B004 (a callable object's method)
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)
        for f in (func, call)
        if f is not None
    )


class PythonStageClient(LocalStageClient):
    def __init__(self, label: str, args: PythonStageArgs) -> None:
        super().__init__(label)
        self._func = import_callable(args.callable)
        self._kwargs = args.kwargs
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()

    async def add_request(self, request: StageRequest) -> None:
        self.check_alive()
        task = asyncio.get_running_loop().create_task(self._run(request))
        self._tasks[request.request_id] = task
        rid = request.request_id

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(rid, None)
            self._cancelled.discard(rid)

        task.add_done_callback(forget)

    async def _run(self, request: StageRequest) -> None:
        rid = request.request_id
        try:
            func = self._func
            if _runs_on_loop(func):  # async: its code is the user's to keep non-blocking
                result = func(request.prompt, request.params, **self._kwargs)
            else:  # sync: called in a worker thread (a generator function returns at once)
                result = await asyncio.to_thread(
                    func, request.prompt, request.params, **self._kwargs
                )
            if inspect.isasyncgen(result):
                ended = False
                try:
                    async for item in result:
                        ended = self._deliver(rid, item)
                        if ended:
                            break
                finally:
                    await result.aclose()
                if not ended:
                    self._finish(rid, None)
            elif inspect.isgenerator(result):
                await self._drain_sync_generator(rid, result)
            else:
                value = await result if inspect.isawaitable(result) else result
                self._finish(rid, _as_output(rid, value))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if rid not in self._cancelled:
                self.emit(
                    StageOutput(
                        request_id=rid,
                        finished=True,
                        finish_reason="error",
                        error=ErrorInfo.from_exception(exc),
                    )
                )

    async def _drain_sync_generator(self, rid: str, gen: Any) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                for item in gen:
                    if stop.is_set():
                        break
                    hand_off(loop, queue.put_nowait, item)
                hand_off(loop, queue.put_nowait, _END)
            except Exception as exc:
                hand_off(loop, queue.put_nowait, exc)

        worker = threading.Thread(target=pump, name=f"{self.label}-{rid}", daemon=True)
        worker.start()
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, Exception):
                    raise item
                if self._deliver(rid, item):
                    return
        finally:
            stop.set()
        self._finish(rid, None)

    def _deliver(self, rid: str, item: Any) -> bool:
        """Emit one yielded item at once (it reaches the orchestrator this loop turn, not when
        the next item is yielded); True when the item itself finished the request."""
        out = _as_output(rid, item)
        if out.finished:
            out.finish_reason = out.finish_reason or "stop"
        self.emit(out)
        return out.finished

    def _finish(self, rid: str, last: StageOutput | None) -> None:
        out = last or StageOutput(request_id=rid)
        out.finished = True
        out.finish_reason = out.finish_reason or "stop"
        self.emit(out)

    async def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            task = self._tasks.pop(rid, None)
            if task is not None:
                self._cancelled.add(rid)
                task.cancel()

    async def shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await super().shutdown()


def make_python_client(stage: Any, replica: int, context: StageContext) -> PythonStageClient:
    args = PythonStageArgs.model_validate(stage.engine_args)
    return PythonStageClient(f"stage '{stage.name}' replica {replica}", args)
