"""Entry point of a stage replica in its own OS process (``python -m omni_core.stage.worker``).

``argv``: the socket fd and a JSON config whose ``factory`` (``"module:function"``) builds a
:class:`WorkerEngine` from the config. The loop takes commands whenever they arrive and steps the
engine while it has work. EOF on the socket — the engine process closed it or died — ends the
worker: no orphans.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import selectors
import socket
import sys
import time
from typing import Any, Protocol

from omni_core.stage.process import HEADER, encode


class WorkerEngine(Protocol):
    """What a process replica's engine implements (all calls on the worker's one thread)."""

    dead: bool
    step_delay_s: float

    def add(self, request: Any) -> None: ...
    def add_input(self, request_id: str, prompt: Any, final: bool) -> None: ...
    def abort(self, request_ids: list[str]) -> None: ...
    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
    def has_work(self) -> bool: ...
    def step(self) -> list[Any]: ...


def build(config: dict[str, Any]) -> WorkerEngine:
    module_name, _, attr = config["factory"].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(config)


def serve(sock: socket.socket, engine: WorkerEngine) -> int:
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    buf = b""
    next_step = 0.0
    compute_s = 0.0
    while True:
        timeout = None
        if engine.has_work():
            timeout = max(0.0, next_step - time.monotonic())
        if sel.select(timeout):
            data = sock.recv(1 << 20)
            if not data:
                return 0
            buf += data
            while len(buf) >= HEADER.size:
                (size,) = HEADER.unpack_from(buf)
                if len(buf) < HEADER.size + size:
                    break
                frame = pickle.loads(buf[HEADER.size : HEADER.size + size])
                buf = buf[HEADER.size + size :]
                started = time.perf_counter()
                handle(engine, frame, sock)
                if frame[0] in ("add", "input"):  # the engine's own input processing
                    compute_s += time.perf_counter() - started
            continue
        if engine.has_work() and time.monotonic() >= next_step:
            started = time.perf_counter()
            outs = engine.step()
            compute_s += time.perf_counter() - started
            if outs:  # with the engine time since the last frame (steps, adds, inputs)
                sock.sendall(encode(("out", outs, compute_s)))
                compute_s = 0.0
            if engine.dead:
                os._exit(17)  # the replica dies abruptly (fault injection)
            next_step = time.monotonic() + engine.step_delay_s


def handle(engine: WorkerEngine, frame: tuple[Any, ...], sock: socket.socket) -> None:
    kind = frame[0]
    if kind == "add":
        engine.add(frame[1])
    elif kind == "input":
        engine.add_input(frame[1], frame[2], frame[3])
    elif kind == "call":
        _, call_id, method, args = frame
        try:
            if method == "ping":
                value: Any = os.getpid()
            elif method == "abort":
                engine.abort(args[0])
                value = None
            else:
                value = engine.rpc(args[0], tuple(args[1]), args[2])
            sock.sendall(encode(("ack", call_id, True, value)))
        except Exception as exc:
            sock.sendall(encode(("ack", call_id, False, (type(exc).__name__, str(exc)))))
        if engine.dead:
            os._exit(17)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    config = json.loads(argv[2])
    try:
        engine = build(config)
    except Exception as exc:  # the parent's ping gets no answer: report why on stderr
        print(
            f"stage worker failed to build its engine: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        return 3
    code = serve(sock, engine)
    # The engine process is gone or done with us: skip interpreter teardown (engine libraries'
    # exit handlers take seconds and hold nothing that needs releasing).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
