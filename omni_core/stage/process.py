"""Stage replicas in their own OS process: the parent-side client.

The replica runs ``python -m omni_core.stage.worker`` with one end of a socketpair; frames are
length-prefixed typed msgspec structs (:mod:`omni_core.stage.wire`: no pickle on the per-token
path). The socket is also the replica's lifeline: when the engine's process
closes it or dies (SIGTERM, SIGKILL, anything), the worker reads EOF and exits, so no stage
process outlives its engine; while it builds its engine (before it reads the socket) the kernel
ends it when its parent dies (:func:`omni_core.stage.worker.die_with_parent`). The worker
builds its engine with the ``factory`` named in its config (``"module:function"``, called with
the config dict).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from omni_core import progress
from omni_core.errors import EngineDeadError, StartupError
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageRequest
from omni_core.stage.dataplane import (
    OWNER_ENV,
    SharedMemoryDataPlane,
    materialize,
    reclaim_segments,
)
from omni_core.stage.local import LocalStageClient
from omni_core.stage.shared_media import media_bytes, share_media
from omni_core.stage.wire import (
    HANDLE_FREE,
    HEADER,
    Ack,
    Call,
    Input,
    Outputs,
    add_frame,
    encode,
    encode_large,
    outputs_of,
    pack_any,
    parent_frames,
)

# A request frame whose prompt holds this many bytes of images or arrays is packed in a thread,
# its large items through shared memory, not pickled on the orchestrator's loop: a 16 Mpx image
# took the loop 121-279 ms (docs/security.md, "Measured").
PACK_OFF_LOOP_BYTES = 1 << 20


class ProcessStageClient(LocalStageClient):
    """Parent side of a process replica: sends commands, streams outputs, correlates calls.

    A frame with a large prompt (:data:`PACK_OFF_LOOP_BYTES`) is packed in a thread; the frames
    of its request that follow it (stream inputs, an abort) wait for it, so none overtakes it."""

    def __init__(
        self,
        label: str,
        config: dict[str, Any],
        env: dict[str, str] | None = None,
        start_timeout_s: float = 600.0,
        log_path: Path | None = None,
        preload: tuple[str, ...] = (),
    ) -> None:
        super().__init__(label)
        self._config = config
        self._env = env
        self._start_timeout_s = start_timeout_s
        self.log_path = log_path
        self._preload = preload
        self.proc: subprocess.Popen[bytes] | None = None
        self._transport: asyncio.Transport | None = None
        self._corruption: str | None = None
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()
        self._plane = SharedMemoryDataPlane()
        self._codec_state: dict[str, Any] = {}  # payload codecs' per-request state (wire)
        # per request: its last frame being packed off the loop (done once written)
        self._packing: dict[str, asyncio.Future[None]] = {}
        # per request: its shared-memory files sent, until its next output or its abort (the
        # worker read them by then): those of a worker that died first are removed here
        self._shared: dict[str, list[str]] = {}
        self.compute_s = 0.0  # engine time the worker reported (steps, requests and inputs)

    def worker_spec(self) -> dict[str, Any]:
        """What another host (a Ray actor) needs to run this replica's worker engine."""
        return {
            "config": self._config,
            "env": dict(self._env or {}),
            "start_timeout_s": self._start_timeout_s,
            "preload": list(self._preload),
        }

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        await super().start()
        # segments a SIGKILLed engine left are freed here; ours are taken by this process
        await asyncio.to_thread(reclaim_segments, self._plane.directory)
        parent, child = socket.socketpair()
        env = {**os.environ, **(self._env or {}), OWNER_ENV: str(os.getpid())}
        log = open(self.log_path, "ab") if self.log_path is not None else None
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "omni_core.stage.worker",
                str(child.fileno()),
                json.dumps(self._config),
                str(os.getpid()),  # the worker dies with this process while it starts
            ],
            pass_fds=[child.fileno()],
            close_fds=True,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
        child.close()
        if log is not None:
            log.close()
        progress.report(
            "stage",
            self.label,
            f"loading in its worker process (pid {self.proc.pid})",
            log_path=self.log_path,
        )
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_connection(lambda: _FrameReader(self), sock=parent)
        for module in self._preload:  # payload types, imported while the worker starts
            await asyncio.to_thread(importlib.import_module, module)
        try:
            await asyncio.wait_for(self._call("ping"), self._start_timeout_s)
        except (EngineDeadError, TimeoutError, RuntimeError) as exc:
            self.kill()
            raise StartupError(
                f"{self.label}: worker failed to start: {exc}{self._log_tail()}"
            ) from exc

    def _log_tail(self, lines: int = 5) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        return f" (log {self.log_path}: " + " | ".join(tail) + ")"

    def _frames(self, buf: bytearray) -> None:
        """Decode every complete frame in ``buf`` (consumed), then hand the outputs over at once:
        called from the socket's ``data_received``, so no task wakes per read."""
        for frame in parent_frames(buf):
            self._on_frame(frame)
        if self._outbox:
            self._hand_over()

    def _corrupt(self, exc: Exception) -> None:
        self._corruption = f"undecodable frame from process {self.pid}: {type(exc).__name__}: {exc}"
        if self._transport is not None:
            self._transport.close()  # connection_lost follows, with this reason
        self.kill()

    def _lost(self) -> None:
        """The socket closed: the worker exited (or we shut it down)."""
        code = self.proc.poll() if self.proc is not None else None
        reason = "shut down" if self._closed else f"process {self.pid} exited (code {code})"
        if self._corruption is not None:
            reason = self._corruption
        self.die(reason)
        for paths in self._shared.values():  # sent, never read
            for path in paths:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self._shared.clear()
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(EngineDeadError(f"{self.label} is dead: {reason}"))
        self._calls.clear()

    def _on_frame(self, frame: Outputs | Ack) -> None:
        if type(frame) is Outputs:
            self.compute_s += frame.compute_s
            for out in outputs_of(frame, self._codec_state):
                payload = out.payload
                if payload is not None and type(payload) not in HANDLE_FREE:
                    out.payload = materialize(payload, self._plane)
                if out.hidden_states is not None:
                    materialize(out.hidden_states, self._plane)
                if out.finished and self._codec_state:  # e.g. an error output: no codec ran
                    self._codec_state.pop(out.request_id, None)
                if self._shared:  # the worker read the request's frame
                    self._shared.pop(out.request_id, None)
                self._outbox.append(out)
        elif type(frame) is Ack:
            fut = self._calls.pop(frame.call_id, None)
            if fut is not None and not fut.done():
                if frame.ok:
                    fut.set_result(frame.value)
                else:
                    fut.set_exception(_remote_error(*frame.value))

    def _send(self, frame: Any) -> None:
        self.check_alive()
        assert self._transport is not None
        self._transport.write(encode(frame))

    async def _call(self, method: str, ids: list[str] | None = None, args: Any = None) -> Any:
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = fut
        self._send(Call(call_id, method, ids, args))
        return await fut

    async def add_request(self, request: StageRequest) -> None:
        rid = request.request_id
        if rid in self._packing or media_bytes(request.prompt) >= PACK_OFF_LOOP_BYTES:
            await self._send_in_order(
                rid, request.prompt, lambda p: add_frame(msgspec.structs.replace(request, prompt=p))
            )
        else:
            self._send(add_frame(request))

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        if request_id in self._packing or media_bytes(prompt) >= PACK_OFF_LOOP_BYTES:
            await self._send_in_order(
                request_id, prompt, lambda p: Input(request_id, pack_any(p), final)
            )
        else:
            self._send(Input(request_id, pack_any(prompt), final))

    async def _send_in_order(
        self, request_id: str, prompt: Any, frame: Callable[[Any], Any]
    ) -> None:
        """Send ``frame(prompt)`` after the frames of ``request_id`` still being packed, packing
        it in a thread: its large images and arrays go to shared-memory files the stage process
        reads (:mod:`~omni_core.stage.shared_media`), the rest is encoded there too; the
        loop only writes the frame, small, to the socket."""
        earlier = self._packing.get(request_id)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._packing[request_id] = mine
        paths: list[str] = []
        try:
            if earlier is not None:
                await asyncio.shield(earlier)
            data = await asyncio.to_thread(
                lambda: encode_large(frame(share_media(prompt, self._plane, paths)))
            )
            self.check_alive()
            assert self._transport is not None
            self._transport.write(data)
            if paths:  # the stage process takes them
                self._shared.setdefault(request_id, []).extend(paths)
                paths.clear()
        finally:
            mine.set_result(None)
            if self._packing.get(request_id) is mine:
                del self._packing[request_id]
            for path in paths:  # never sent: nobody else removes them
                with contextlib.suppress(OSError):
                    os.unlink(path)

    async def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:  # what payload codecs kept for them (no output follows)
            self._codec_state.pop(rid, None)
        packing = [self._packing[rid] for rid in request_ids if rid in self._packing]
        if packing:  # an abort never overtakes its request's add
            await asyncio.wait(packing)
        await self._call("abort", list(request_ids))
        if self._shared:  # answered after the worker read their frames
            for rid in request_ids:
                self._shared.pop(rid, None)

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        # control RPCs pass arbitrary user objects: their arguments (and results) are pickled
        return await self._call("rpc", args=pack_any((method, tuple(args), kwargs)))

    async def shutdown(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        if self.proc is not None and self.proc.poll() is None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout=5.0)
            except TimeoutError:
                self.kill()
                await asyncio.to_thread(self.proc.wait)
        await super().shutdown()

    def kill(self) -> None:
        """SIGKILL the worker (tests of replica death; last resort at shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)


class _FrameReader(asyncio.Protocol):
    """The parent end of the worker's socket: bytes in, frames decoded where they land."""

    def __init__(self, client: ProcessStageClient) -> None:
        self.client = client
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            self.client._frames(self.buf)
        except Exception as exc:  # a frame we cannot decode: the replica is unusable
            self.client._corrupt(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost()


def _remote_error(type_name: str, message: str) -> Exception:
    if type_name == "NotImplementedError":
        return NotImplementedError(message)
    if type_name == "EngineDeadError":
        return EngineDeadError(message)
    return RuntimeError(f"{type_name}: {message}")


__all__ = ["HEADER", "ProcessStageClient", "StageOutput", "encode"]
