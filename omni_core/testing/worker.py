"""Entry point of a ``scripted`` replica running as its own OS process.

``python -m omni_core.testing.worker FD CONFIG_JSON``. Exits when its socket reaches EOF, which
happens when the engine process closes it or dies (no orphans, whatever killed the parent).
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import sys
import time
from typing import Any

import msgspec

from omni_core.testing.scripted_core import ScriptedArgs, ScriptedCore

_HEADER = struct.Struct("!I")


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    config = msgspec.json.decode(argv[2])
    args = ScriptedArgs.model_validate(config["args"])
    core = ScriptedCore(config["stage_name"], args, config["replica"])
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    buf = b""
    next_step = 0.0

    def send(*frame: Any) -> None:
        body = enc.encode(frame)
        sock.sendall(_HEADER.pack(len(body)) + body)

    while True:
        timeout = None
        if core.has_work():
            timeout = max(0.0, next_step - time.monotonic())
        if sel.select(timeout):
            data = sock.recv(1 << 16)
            if not data:
                return 0
            buf += data
            while len(buf) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buf)
                if len(buf) < _HEADER.size + size:
                    break
                frame = dec.decode(buf[_HEADER.size : _HEADER.size + size])
                buf = buf[_HEADER.size + size :]
                handle(core, frame, send)
            continue
        if core.has_work() and time.monotonic() >= next_step:
            outs = core.step()
            if outs:
                send("out", [msgspec.to_builtins(o) for o in outs])
            if core.dead:
                os._exit(17)  # die_after: the replica dies abruptly
            next_step = time.monotonic() + core.args.delay_s


def handle(core: ScriptedCore, frame: list[Any], send: Any) -> None:
    kind = frame[0]
    if kind == "add":
        _, rid, prompt, max_tokens, streaming, faults = frame
        core.add(rid, prompt, max_tokens, streaming, faults)
    elif kind == "input":
        _, rid, prompt, final = frame
        core.add_input(rid, prompt, final)
    elif kind == "call":
        _, call_id, method, args = frame
        try:
            if method == "ping":
                value: Any = os.getpid()
            elif method == "abort":
                core.abort(args[0])
                value = None
            else:
                value = core.rpc(args[0], tuple(args[1]), args[2])
            send("ack", call_id, True, value)
            if core.dead:
                os._exit(17)
        except Exception as exc:
            send("ack", call_id, False, [type(exc).__name__, str(exc)])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
