"""The per-output cost of the stage-process wire (``omni bench pipeline``'s first rows): one
vLLM token output (with its ``RequestOutput`` payload) from a worker's ``step()`` to the client's
:class:`~omni_core.outputs.StageOutput`, through a socketpair in this thread, against a bare
socketpair round of the same bytes (the floor: no encoding at all) and against the former wire
(length-prefixed pickle of the output and its payload). The client's ``RequestOutput`` is built
when first read: ``typed wire`` leaves it unread (what a caller reading our own output's text and
token ids costs), ``typed wire, payload read`` reads it (it is built)."""

from __future__ import annotations

import pickle
import socket
import time
from typing import Any

from omni_core.bench.orchestration import CheckFailed, Row
from omni_core.outputs import StageOutput
from omni_core.stage import wire


def _outputs(n: int) -> list[StageOutput]:
    from omni_core.kinds import vllm_adapter as va

    outs = []
    for i in range(n):
        completion = va.CompletionOutput(
            index=0, text=" tok", token_ids=[100 + i], cumulative_logprob=None, logprobs=None
        )
        ro = va.RequestOutput(f"req-{i}", None, list(range(24)), None, [completion], False)
        outs.append(
            StageOutput(request_id=f"req-{i}", token_ids=[100 + i], text=" tok", payload=ro)
        )
    return outs


BLOCKS = 5  # each case timed in this many blocks, interleaved with the others' (shared CPUs)


def _per_output_s(rounds: int, cases: list[Any]) -> list[float]:
    """Seconds per call of each case: the fastest of :data:`BLOCKS` blocks of ``rounds //
    BLOCKS`` calls, the cases' blocks interleaved, so that a burst of other work on the machine
    spoils one block of every case rather than all of one case."""
    per_block = max(1, rounds // BLOCKS)
    best = [float("inf")] * len(cases)
    for once in cases:
        once()
    for _ in range(BLOCKS):
        for i, once in enumerate(cases):
            start = time.perf_counter()
            for _ in range(per_block):
                once()
            best[i] = min(best[i], (time.perf_counter() - start) / per_block)
    return best


def wire_rows(quick: bool) -> list[Row]:
    rounds = 2000 if quick else 20000
    out = _outputs(1)
    a, b = socket.socketpair()
    try:
        state: dict[str, Any] = {}
        buf = bytearray()

        def received() -> StageOutput:
            a.sendall(wire.encode(wire.outputs_frame(out, 0.0)))
            buf.extend(b.recv(1 << 16))
            (frame,) = wire.parent_frames(buf)
            assert isinstance(frame, wire.Outputs)
            (got,) = wire.outputs_of(frame, state)
            return got

        def typed() -> None:
            if received().payload is None:
                raise CheckFailed("the RequestOutput payload was not rebuilt")

        def typed_read() -> None:  # the caller reads the payload: RequestOutput built
            if received().payload.request_output().outputs[0].token_ids != out[0].token_ids:
                raise CheckFailed("the RequestOutput payload differs")

        data = wire.encode(wire.outputs_frame(out, 0.0))

        def bare() -> None:
            a.sendall(data)
            b.recv(1 << 16)

        def pickled() -> None:
            body = pickle.dumps(("out", out, 0.0), protocol=pickle.HIGHEST_PROTOCOL)
            a.sendall(wire.HEADER.pack(len(body)) + body)
            got = b.recv(1 << 16)
            pickle.loads(got[wire.HEADER.size :])

        t_bare, t_typed, t_read, t_pickle = _per_output_s(
            rounds, [bare, typed, typed_read, pickled]
        )
    finally:
        a.close()
        b.close()
    case = f"one vLLM token output ({len(data)} B frame)"
    return [
        Row("pipeline", case, "bare socketpair round", t_bare * 1e6, "µs"),
        Row("pipeline", case, "typed wire", t_typed * 1e6, "µs", t_bare * 1e6, "bare socketpair"),
        Row(
            "pipeline",
            case,
            "typed wire, payload read",
            t_read * 1e6,
            "µs",
            t_bare * 1e6,
            "bare socketpair",
        ),
        Row("pipeline", case, "former pickle wire", t_pickle * 1e6, "µs", t_typed * 1e6, "typed"),
    ]
