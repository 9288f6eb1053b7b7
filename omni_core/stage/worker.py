"""Entry point of a stage replica in its own OS process (``python -m omni_core.stage.worker``).

``argv``: the socket fd, a JSON config whose ``factory`` (``"module:function"``) builds a
:class:`WorkerEngine` from the config, and (optional) the pid of the engine process that started
it. The loop takes commands whenever they arrive and steps the
engine while it has work. EOF on the socket — the engine process closed it or died — ends the
worker: no orphans. While the engine is being built (imports, weights: seconds to minutes) the
socket is not read yet, so the kernel ends the worker instead (:func:`die_with_parent`).

Failures are request-scoped (:class:`RequestScoped`): an exception while accepting one request
(``add``, ``add_input``) fails that request only — it gets one error output (400 for the engine's
``request_errors``, validation errors; 500 otherwise) — and the replica keeps serving. Engines
catch what they can pin to one request inside ``step`` themselves (:func:`error_output`). Only
the engine's own failure ends the replica: one of its ``fatal_errors``, or an exception from
``step`` (it cannot be pinned to a request).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import selectors
import signal
import socket
import sys
import time
from functools import cache
from typing import Any, Protocol

import msgspec

from omni_core.outputs import ErrorInfo, StageOutput
from omni_core.stage.wire import (
    Ack,
    Add,
    Call,
    Input,
    add_request_id,
    decode_to_worker,
    encode,
    outputs_frame,
    pack_any,
    request_of,
    split,
)

logger = logging.getLogger(__name__)

ORPHANED = 19  # exit code of a worker whose engine process was gone before it could start
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

REQUEST_ERRORS: tuple[type[BaseException], ...] = (ValueError, OverflowError)
ENGINE_FAILED = 18  # exit code of a worker whose engine failed


class WorkerEngine(Protocol):
    """What a process replica's engine implements (all calls on the worker's one thread).

    Optional: ``request_errors`` (exception types meaning "this request is invalid": 400;
    default ValueError, OverflowError) and ``fatal_errors`` (types meaning the engine itself
    failed: the replica ends; default none).
    """

    @property
    def dead(self) -> bool: ...
    @property
    def step_delay_s(self) -> float: ...

    def add(self, request: Any) -> None: ...
    def add_input(self, request_id: str, prompt: Any, final: bool) -> None: ...
    def abort(self, request_ids: list[str]) -> None: ...
    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
    def has_work(self) -> bool: ...
    def step(self) -> list[Any]: ...


def error_output(
    request_id: str,
    exc: BaseException,
    request_errors: tuple[type[BaseException], ...] = REQUEST_ERRORS,
) -> StageOutput:
    """The terminal output of a request that failed in this stage: 400 if ``exc`` is one of
    ``request_errors`` (the request is invalid), else its class's status (e.g. 503 for a
    :class:`~omni_core.errors.StageUnavailableError`), else 500."""
    status = 400 if isinstance(exc, request_errors) else None
    return StageOutput(
        request_id=request_id,
        finished=True,
        finish_reason="error",
        error=ErrorInfo.from_exception(exc, status_code=status),
    )


FAULTS = ("add", "step")


@cache
def _faults_enabled() -> bool:
    from omni_core.config.settings import OmniSettings

    return OmniSettings().fault_injection


def injected_fault(params: Any) -> str | None:
    """Testing only: the fault a request asks its stage to inject (``extra["omni_fault"]``:
    ``"add"`` or ``"step"``) when ``OMNI_FAULT_INJECTION`` is set in the stage's environment."""
    if not _faults_enabled():
        return None
    fault = params.extra.get("omni_fault")
    return fault if fault in FAULTS else None


class RequestScoped:
    """A :class:`WorkerEngine` whose failures to accept a request fail that request only.

    The failed request's partial state is aborted in the engine, and its error output goes out
    with the next step's outputs. Everything else passes through.
    """

    def __init__(self, engine: WorkerEngine) -> None:
        self.engine = engine
        self.request_errors: tuple[type[BaseException], ...] = getattr(
            engine, "request_errors", REQUEST_ERRORS
        )
        self.fatal_errors: tuple[type[BaseException], ...] = getattr(engine, "fatal_errors", ())
        self.failed: list[StageOutput] = []

    @property
    def dead(self) -> bool:
        return self.engine.dead

    @property
    def step_delay_s(self) -> float:
        return self.engine.step_delay_s

    def add(self, request: Any) -> None:
        try:
            self.engine.add(request)
        except self.fatal_errors:
            raise
        except Exception as exc:
            self.fail(request.request_id, exc, "add")

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        try:
            self.engine.add_input(request_id, prompt, final)
        except self.fatal_errors:
            raise
        except Exception as exc:
            self.fail(request_id, exc, "add_input")

    def fail(self, request_id: str, exc: Exception, where: str) -> None:
        out = error_output(request_id, exc, self.request_errors)
        assert out.error is not None
        logger.warning(
            "request %s failed in %s (%d): %s: %s",
            request_id,
            where,
            out.error.status_code,
            out.error.type,
            out.error.message,
        )
        try:
            self.engine.abort([request_id])  # drop whatever part of it the engine holds
        except self.fatal_errors:
            raise
        except Exception:
            logger.warning("abort of failed request %s failed", request_id, exc_info=True)
        self.failed.append(out)

    def abort(self, request_ids: list[str]) -> None:
        self.engine.abort(request_ids)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.engine.rpc(method, args, kwargs)

    def has_work(self) -> bool:
        return bool(self.failed) or self.engine.has_work()

    def step(self) -> list[Any]:
        outs = self.engine.step() if self.engine.has_work() else []
        if self.failed:
            failed, self.failed = self.failed, []
            return [*failed, *outs]
        return outs


def build(config: dict[str, Any]) -> RequestScoped:
    """The engine the config's factory builds, with request-scoped failures."""
    module_name, _, attr = config["factory"].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return RequestScoped(factory(config))


def serve(sock: socket.socket, engine: WorkerEngine) -> int:
    """Serve until EOF (0), or until the engine fails (:data:`ENGINE_FAILED`)."""
    try:
        return _serve(sock, engine)
    except Exception:
        logger.critical("the stage engine failed: ending this replica", exc_info=True)
        return ENGINE_FAILED


def _serve(sock: socket.socket, engine: WorkerEngine) -> int:
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    buf = bytearray()
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
            for body in split(buf):  # one copy per read, not one per frame
                try:
                    frame = decode_to_worker(body)
                except msgspec.ValidationError as exc:  # one request's fields: it fails alone
                    rid = add_request_id(body)
                    if rid is None:
                        raise
                    send_outputs(sock, [error_output(rid, exc)], 0.0)
                    continue
                started = time.perf_counter()
                handle(engine, frame, sock)
                if type(frame) is not Call:  # the engine's own input processing
                    compute_s += time.perf_counter() - started
            continue
        if engine.has_work() and time.monotonic() >= next_step:
            started = time.perf_counter()
            outs = engine.step()
            compute_s += time.perf_counter() - started
            if outs:  # one frame per step, with the engine time since the last frame
                send_outputs(sock, outs, compute_s)
                compute_s = 0.0
            if engine.dead:
                os._exit(17)  # the replica dies abruptly (fault injection)
            next_step = time.monotonic() + engine.step_delay_s


def send_outputs(sock: socket.socket, outs: list[Any], compute_s: float) -> None:
    """One frame of a step's outputs. An output the wire cannot carry (a numpy integer among
    its token ids, an unknown object in a typed field) becomes its request's error output
    (500): the request fails, the replica and the other requests go on."""
    try:
        frame = encode(outputs_frame(outs, compute_s))
    except (TypeError, ValueError, OverflowError):
        kept = []
        for out in outs:
            try:
                encode(outputs_frame([out], 0.0))
            except (TypeError, ValueError, OverflowError) as exc:
                logger.error("output of request %s cannot cross the wire: %s", out.request_id, exc)
                out = error_output(out.request_id, RuntimeError(f"unencodable output: {exc}"))
            kept.append(out)
        frame = encode(outputs_frame(kept, compute_s))
    sock.sendall(frame)


def handle(engine: WorkerEngine, frame: Add | Input | Call, sock: socket.socket) -> None:
    if type(frame) is Add:
        engine.add(request_of(frame))
    elif type(frame) is Input:
        engine.add_input(frame.request_id, frame.prompt, frame.final)
    elif type(frame) is Call:
        try:
            if frame.method == "ping":
                value: Any = os.getpid()
            elif frame.method == "abort":
                engine.abort(frame.ids or [])
                value = None
            else:
                method, args, kwargs = frame.args
                value = pack_any(engine.rpc(method, tuple(args), kwargs))
            sock.sendall(encode(Ack(frame.call_id, True, value)))
        except Exception as exc:
            sock.sendall(encode(Ack(frame.call_id, False, [type(exc).__name__, str(exc)])))
        if engine.dead:
            os._exit(17)


def die_with_parent(parent_pid: int | None) -> None:
    """The start-up half of the lifeline: until the engine is built, the kernel SIGKILLs this
    worker when its parent dies (Linux ``PR_SET_PDEATHSIG``) — even mid-import, where no Python
    code of ours runs. A parent that died before that was set is caught by the parent pid check
    (the worker was reparented): the worker ends at once with :data:`ORPHANED`."""
    _set_parent_death_signal(signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(ORPHANED)


def _set_parent_death_signal(sig: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)`` (0 clears it); elsewhere than Linux: nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[3]) if len(argv) > 3 else None)  # first: building may take minutes
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sock = socket.socket(fileno=int(argv[1]))
    config = json.loads(argv[2])
    try:
        engine = build(config)
    except Exception as exc:  # the parent's ping gets no answer: report why on stderr
        print(
            f"stage worker failed to build its engine: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        return 3
    # Built: from here EOF on the socket ends the worker. The death signal is cleared because it
    # follows the parent *thread* that started the worker, not the engine process.
    _set_parent_death_signal(0)
    code = serve(sock, engine)
    # The engine process is gone or done with us: skip interpreter teardown (engine libraries'
    # exit handlers take seconds and hold nothing that needs releasing).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))


def stage_context_here(pipeline_name: str, settings: Any) -> Any:
    """A :class:`~omni_core.stage.client.StageContext` rebuilt in this process (a Ray actor's, a
    worker's) from the one sent to it: the engine's settings travel, the plugin host is built
    here anew from them (a pluggy manager does not pickle), so it sees the same plugins."""
    from omni_core.plugin.hooks import PluginHost
    from omni_core.stage.client import StageContext

    return StageContext.bound(pipeline_name, settings, PluginHost.create(settings))
