"""vLLM's ``RequestOutput`` over the stage-process wire: the client's payload holds the fields
(``WireRequestOutput``); ``request_output()`` builds vLLM's object once, equal (attribute by
attribute) to what vLLM's own constructors build."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

pytest.importorskip("vllm")

from vllm.logprobs import Logprob

from omni_core.kinds import vllm_adapter as va
from omni_core.outputs import StageOutput, TokenLogprob
from omni_core.stage import wire
from omni_core.stage.dataplane import SharedMemoryDataPlane, materialize


def attributes(ro: Any) -> dict[str, Any]:
    """Every attribute of a ``RequestOutput``, its completions' as dicts too (read one first: a
    lazy payload's ``vars()`` are empty until then)."""
    assert ro.request_id == "r"
    found = dict(vars(ro))
    found["outputs"] = [dict(vars(c)) for c in found["outputs"]]
    return found


def worker_output(i: int, first: bool, finished: bool) -> StageOutput:
    """A vLLM stage's output as its worker emits it (payload: vLLM's RequestOutput)."""
    logprobs = [{7 + i: TokenLogprob(-0.5, 1, "x"), 3: TokenLogprob(-2.0, 2, None)}]
    steps = [None, {11: Logprob(-1.25, rank=1, decoded_token="hi")}] if first else None
    completion = va.CompletionOutput(
        index=0,
        text=f"t{i}",
        token_ids=[7 + i],
        cumulative_logprob=-0.5 * (i + 1),
        logprobs=logprobs,
        finish_reason="stop" if finished else None,
        stop_reason="." if finished else None,
    )
    ro = va.RequestOutput(
        "r", "hi there", [1, 11], steps, [completion], finished, num_cached_tokens=2
    )
    return StageOutput(
        request_id="r",
        token_ids=[7 + i],
        text=f"t{i}",
        payload=ro,
        finished=finished,
        finish_reason="stop" if finished else None,
        logprobs=logprobs,
        prompt_token_ids=[1, 11] if first else None,
    )


def through_wire(outs: list[StageOutput], state: dict[str, Any]) -> list[StageOutput]:
    buf = bytearray(wire.encode(wire.outputs_frame(outs, 0.0)))
    (frame,) = wire.parent_frames(buf)
    assert isinstance(frame, wire.Outputs) and not buf
    return wire.outputs_of(frame, state)


def expected(i: int, first: bool, finished: bool) -> Any:
    """What the client's payload must equal: vLLM's constructors, given the client's values."""
    completion = va.CompletionOutput(
        index=0,
        text=f"t{i}",
        token_ids=[7 + i],
        cumulative_logprob=-0.5 * (i + 1),
        logprobs=[{7 + i: TokenLogprob(-0.5, 1, "x"), 3: TokenLogprob(-2.0, 2, None)}],
        finish_reason="stop" if finished else None,
        stop_reason="." if finished else None,
    )
    steps = [None, {11: TokenLogprob(-1.25, 1, "hi")}] if first else None
    return va.RequestOutput(
        "r", "hi there", [1, 11], steps, [completion], finished, num_cached_tokens=2
    )


def test_the_payload_builds_once_what_vllms_constructors_build() -> None:
    state: dict[str, Any] = {}
    sent = [worker_output(0, True, False), worker_output(1, False, False)]
    got = through_wire(sent, state)
    got += through_wire([worker_output(2, False, True)], state)
    assert state == {}  # the request's prompt, kept from its first output to its last
    for i, out in enumerate(got):
        assert type(out.payload) is va.WireRequestOutput
        assert not out.payload.built  # nothing built until asked
        want = expected(i, i == 0, i == 2)
        ro = out.payload.request_output()
        assert type(ro) is va.RequestOutput and out.payload.built
        assert out.payload.request_output() is ro  # cached
        assert attributes(ro) == attributes(want)
        assert ro.outputs[0] == want.outputs[0]
        assert out.payload.outputs is ro.outputs  # other attributes read from the built one
    assert got[0].payload.request_output().prompt_logprobs[1][11].logprob == -1.25


def test_a_payload_reprs_pickles_and_copies_with_its_fields() -> None:
    (out,) = through_wire([worker_output(0, True, True)], {})
    assert "hi there" in repr(out.payload)
    (out,) = through_wire([worker_output(0, True, True)], {})
    for clone in (pickle.loads(pickle.dumps(out.payload)), copy.copy(out.payload)):
        assert type(clone) is va.WireRequestOutput
        assert attributes(clone.request_output()) == attributes(expected(0, True, True))
    (out,) = through_wire([worker_output(0, True, True)], {})
    assert materialize(out.payload, SharedMemoryDataPlane()) is out.payload
    assert not out.payload.built  # looking for handles did not build it
    with pytest.raises(AttributeError):
        _ = out.payload.no_such_attribute


def test_aborted_requests_prompt_state_is_dropped_and_a_payload_read_late_keeps_its_values() -> (
    None
):
    state: dict[str, Any] = {}
    (first,) = through_wire([worker_output(0, True, False)], state)
    assert "r" in state
    state.pop("r")  # what the client does at abort: a later request "r" starts afresh
    (later,) = through_wire([worker_output(1, False, False)], state)
    assert later.payload.prompt is None and later.payload.prompt_token_ids is None
    assert first.payload.prompt == "hi there"  # read after the state was dropped


def test_a_payload_crosses_the_wire_again_from_its_client() -> None:
    state: dict[str, Any] = {}
    (out,) = through_wire([worker_output(0, True, False)], state)
    (again,) = through_wire([out], {})
    assert attributes(again.payload.request_output()) == attributes(expected(0, True, False))


def test_a_change_to_the_built_object_is_what_every_reader_sees() -> None:
    (out,) = through_wire([worker_output(0, True, False)], {})
    out.payload.request_output().finished = True
    assert out.payload.finished is True and out.payload.outputs[0].text == "t0"
    with pytest.raises(AttributeError):  # the holder itself takes no attributes
        out.payload.prompt = "other"


def test_the_client_looks_for_data_plane_handles_in_audio_not_in_request_outputs() -> None:
    from omni_core.media import AudioChunk

    assert {va.RequestOutput, va.WireRequestOutput} <= wire.HANDLE_FREE
    assert AudioChunk not in wire.HANDLE_FREE


def test_two_threads_asking_at_once_get_one_object_built_once(monkeypatch) -> None:
    """A bridge (orchestrator thread) and a caller (its own thread) may ask one payload at
    once: the second waits on the lock for the first one's build, never builds a second one."""
    import threading
    import time

    (out,) = through_wire([worker_output(0, True, False)], {})
    entered, release = threading.Event(), threading.Event()
    real = va.CompletionOutput
    builds: list[int] = []

    def slow_completion(*args: Any, **kwargs: Any) -> Any:  # the first build, held midway
        builds.append(1)
        entered.set()
        assert release.wait(5)
        return real(*args, **kwargs)

    monkeypatch.setattr(va, "CompletionOutput", slow_completion)
    seen: dict[str, Any] = {}

    def read(name: str) -> None:
        seen[name] = out.payload.request_output()

    first = threading.Thread(target=read, args=("first",))
    first.start()
    assert entered.wait(5)
    second = threading.Thread(target=read, args=("second",))
    second.start()
    time.sleep(0.05)
    assert seen == {}  # the second reader waits for the build
    release.set()
    first.join(5)
    second.join(5)
    assert seen["first"] is seen["second"] and builds == [1]
    assert seen["first"].prompt == "hi there" and seen["first"].outputs[0].text == "t0"


def test_a_build_that_fails_raises_on_every_use_and_never_hangs(monkeypatch) -> None:
    (out,) = through_wire([worker_output(0, True, False)], {})

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("vLLM changed its constructor")

    monkeypatch.setattr(va, "CompletionOutput", broken)
    for _ in range(2):  # the fields are kept: the next use tries again instead of waiting
        with pytest.raises(RuntimeError, match="constructor"):
            _ = out.payload.request_output()
    monkeypatch.undo()
    assert out.payload.request_output().outputs[0].text == "t0" and out.payload.built


def test_a_request_ending_without_a_payload_drops_its_codec_state_in_the_client() -> None:
    """A request whose first output kept its prompt in the client's codec state and that then
    fails (an error output: no RequestOutput, so the codec never sees its end) leaves nothing
    behind in the replica's client."""
    from omni_core.stage.process import ProcessStageClient
    from omni_core.stage.worker import error_output

    client = ProcessStageClient("stage 'x' replica 0", {})
    first = wire.outputs_frame([worker_output(0, True, False)], 0.0)
    client._on_frame(wire.parent_frames(bytearray(wire.encode(first)))[0])
    assert "r" in client._codec_state
    failed = wire.outputs_frame([error_output("r", RuntimeError("boom"))], 0.0)
    client._on_frame(wire.parent_frames(bytearray(wire.encode(failed)))[0])
    assert client._codec_state == {}
    assert [o.finished for o in client._outbox] == [False, True]
