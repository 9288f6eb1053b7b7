"""``scripted`` stage clients: in-process (an asyncio driver) or one OS process per replica.

The process mode exists for tests of process death and orphans: the replica runs
``python -m omni_core.testing.worker`` and talks over a socketpair (length-prefixed msgpack). The
socket is also its lifeline: when the engine's process dies, the worker reads EOF and exits.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import struct
import subprocess
import sys
from typing import Any

import msgspec

from omni_core.errors import EngineDeadError, StartupError
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageContext, StageRequest
from omni_core.stage.local import LocalStageClient
from omni_core.testing.scripted_core import ScriptedArgs, ScriptedCore

_HEADER = struct.Struct("!I")


class ScriptedStageClient(LocalStageClient):
    """In-process replica: steps only after the orchestrator took the previous batch."""

    def __init__(self, label: str, stage_name: str, args: ScriptedArgs, replica: int = 0) -> None:
        super().__init__(label)
        self.core = ScriptedCore(stage_name, args, replica)
        self._args = args
        self._work: asyncio.Event | None = None
        self._driver: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._args.start_delay_s:
            await asyncio.sleep(self._args.start_delay_s)  # a slow model load
        if self._args.start_fails:
            raise StartupError(f"{self.label}: start_fails is set")
        await super().start()
        self._work = asyncio.Event()
        self._driver = asyncio.get_running_loop().create_task(self._drive())

    async def _drive(self) -> None:
        assert self._work is not None
        while True:
            await self._work.wait()
            self._work.clear()
            if self._outbox or not self.core.has_work():
                continue
            if self._args.delay_s:
                await asyncio.sleep(self._args.delay_s)
            for out in self.core.step():
                self._emit(out)
            if self.core.dead:
                self._die(f"die_after={self._args.die_after} reached")
                return
            if not self._outbox and self.core.has_work():
                self._work.set()  # whole-output steps emit nothing: keep stepping

    def _on_taken(self) -> None:
        if self._work is not None:
            self._work.set()

    async def add_request(self, request: StageRequest) -> None:
        self._check_alive()
        self.core.add(
            request.request_id,
            request.prompt,
            request.params.max_tokens,
            request.streaming_input,
            request.params.extra.get("scripted"),
        )
        self._on_taken()

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self._check_alive()
        self.core.add_input(request_id, prompt, final)
        self._on_taken()

    async def abort(self, request_ids: list[str]) -> None:
        self._check_alive()
        self.core.abort(request_ids)
        self._on_taken()

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._check_alive()
        result = self.core.rpc(method, args, kwargs)
        if self.core.dead:
            self._die(f"killed by RPC '{method}'")
        self._on_taken()
        return result

    async def shutdown(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
        await super().shutdown()


class ScriptedProcessClient(LocalStageClient):
    """One replica in its own OS process (``process: true``)."""

    def __init__(self, label: str, stage_name: str, args: ScriptedArgs, replica: int = 0) -> None:
        self._replica = replica
        super().__init__(label)
        self._stage_name = stage_name
        self._args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()
        self._encoder = msgspec.msgpack.Encoder()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        if self._args.start_fails:
            raise StartupError(f"{self.label}: start_fails is set")
        await super().start()
        parent, child = socket.socketpair()
        config = msgspec.json.encode(
            {
                "stage_name": self._stage_name,
                "args": self._args.model_dump(),
                "replica": self._replica,
            }
        ).decode()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "omni_core.testing.worker", str(child.fileno()), config],
            pass_fds=[child.fileno()],
            close_fds=True,
            stdin=subprocess.DEVNULL,
        )
        child.close()
        reader, self._writer = await asyncio.open_connection(sock=parent)
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
        await self._call("ping")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = msgspec.msgpack.Decoder()
        try:
            while True:
                header = await reader.readexactly(_HEADER.size)
                (size,) = _HEADER.unpack(header)
                kind, *rest = decoder.decode(await reader.readexactly(size))
                if kind == "out":
                    for raw in rest[0]:
                        self._emit(msgspec.convert(raw, StageOutput))
                elif kind == "ack":
                    call_id, ok, value = rest
                    fut = self._calls.pop(call_id, None)
                    if fut is not None and not fut.done():
                        if ok:
                            fut.set_result(value)
                        else:
                            exc_type, message = value
                            exc: Exception = (
                                NotImplementedError(message)
                                if exc_type == "NotImplementedError"
                                else RuntimeError(message)
                            )
                            fut.set_exception(exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        reason = "shut down" if self._closed else f"process {self.pid} exited"
        self._die(reason)
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(EngineDeadError(f"{self.label} is dead: {reason}"))
        self._calls.clear()

    def _send(self, *frame: Any) -> None:
        self._check_alive()
        assert self._writer is not None
        body = self._encoder.encode(frame)
        self._writer.write(_HEADER.pack(len(body)) + body)

    async def _call(self, method: str, *args: Any) -> Any:
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = fut
        self._send("call", call_id, method, list(args))
        return await fut

    async def add_request(self, request: StageRequest) -> None:
        self._send(
            "add",
            request.request_id,
            request.prompt,
            request.params.max_tokens,
            request.streaming_input,
            request.params.extra.get("scripted"),
        )

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self._send("input", request_id, prompt, final)

    async def abort(self, request_ids: list[str]) -> None:
        await self._call("abort", request_ids)

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return await self._call("rpc", method, list(args), kwargs)

    async def shutdown(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self.proc is not None and self.proc.poll() is None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout=2.0)
            except TimeoutError:
                os.kill(self.proc.pid, signal.SIGKILL)
                await asyncio.to_thread(self.proc.wait)
        if self._reader_task is not None:
            self._reader_task.cancel()
        await super().shutdown()

    def kill(self) -> None:
        """Kill the worker process (tests of replica death)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)


def make_scripted_client(stage: Any, replica: int, context: StageContext) -> LocalStageClient:
    args = ScriptedArgs.model_validate(stage.engine_args)
    label = f"stage '{stage.name}' replica {replica}"
    if args.process:
        return ScriptedProcessClient(label, stage.name, args, replica)
    return ScriptedStageClient(label, stage.name, args, replica)
