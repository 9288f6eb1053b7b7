"""The stage-process wire keeps failures request-scoped: an ``add`` frame whose params do not
validate in the worker, or an output the wire cannot carry, fails that one request; the replica
goes on serving the others."""

from __future__ import annotations

import socket
import threading
from typing import Any

import msgspec
import numpy as np

from omni_core.outputs import StageOutput
from omni_core.sampling import SamplingParams
from omni_core.stage import worker
from omni_core.stage.wire import Add, decode_to_parent, encode, split
from tests.stage.engines import IdleEngine


class EchoEngine(IdleEngine):
    """Finishes every request in one step; request 'np' answers numpy token ids."""

    def __init__(self) -> None:
        self.pending: list[str] = []

    def add(self, request: Any) -> None:
        self.pending.append(request.request_id)

    def has_work(self) -> bool:
        return bool(self.pending)

    def step(self) -> list[StageOutput]:
        outs = []
        for rid in self.pending:
            ids = list(np.array([5, 6])) if rid == "np" else [5, 6]
            outs.append(StageOutput(request_id=rid, token_ids=ids, finished=True))
        self.pending = []
        return outs


def _outputs(sock: socket.socket, wanted: int) -> dict[str, Any]:
    buf = bytearray()
    got: dict[str, Any] = {}
    while len(got) < wanted:
        data = sock.recv(1 << 16)
        assert data, "the worker ended"
        buf += data
        for body in split(buf):
            for out in decode_to_parent(body).outputs:
                got[out.request_id] = out
    return got


def test_bad_params_and_an_unencodable_output_fail_only_their_request():
    parent, child = socket.socketpair()
    served = threading.Thread(target=worker._serve, args=(child, EchoEngine()), daemon=True)
    served.start()
    try:
        good = SamplingParams(max_tokens=4)
        # a plugin's params merged unchecked: out of the worker's range for max_tokens
        bad = msgspec.structs.replace(good, max_tokens=2**63)
        for rid, params in (("bad", bad), ("np", good), ("ok", good)):
            parent.sendall(encode(Add(rid, [1, 2], params)))
        got = _outputs(parent, 3)
        assert got["bad"].finished and got["bad"].error.status_code == 400
        assert "max_tokens" in got["bad"].error.message
        assert got["np"].finished and got["np"].error.status_code == 500
        assert got["ok"].error is None and got["ok"].token_ids == [5, 6]
        parent.sendall(encode(Add("after", [1], good)))  # the replica still serves
        assert _outputs(parent, 1)["after"].token_ids == [5, 6]
        assert served.is_alive()
    finally:
        parent.close()
        served.join(5)
    assert not served.is_alive()  # EOF ends the worker
