"""The stage-process wire: typed frames, no pickle on the per-token path, arrays as handles or
raw bytes, pickle only for what no type describes (and where the docs say)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest

from omni_core.outputs import ErrorInfo, HiddenStates, StageOutput, TokenLogprob
from omni_core.sampling import SamplingParams
from omni_core.stage import wire
from omni_core.stage.client import StageRequest
from omni_core.stage.dataplane import TensorHandle


def raw_frame(data: bytes) -> tuple[str, set[int]]:
    """A frame's tag and the extension codes inside it, read without the typed decoder."""
    codes: set[int] = set()

    def hook(code: int, _: memoryview) -> None:
        codes.add(code)

    body = wire.split(bytearray(data))
    assert len(body) == 1
    decoded: Any = msgspec.msgpack.Decoder(ext_hook=hook).decode(body[0])
    return decoded[0], codes


def per_token_outputs() -> list[StageOutput]:
    lp = {5: TokenLogprob(-0.25, 1, "a"), 9: TokenLogprob(-1.5, 2, None)}
    hidden = HiddenStates(
        3,
        {
            "final": np.arange(8, dtype=np.float32).reshape(2, 4),
            "embeddings": TensorHandle("omni-x", (2, 4), "float32"),
        },
    )
    return [
        StageOutput(request_id="a", token_ids=[5], text="a", prompt_token_ids=[1, 2, 3]),
        StageOutput(request_id="b", token_ids=[7, 8], text="bc", logprobs=[lp, lp]),
        StageOutput(request_id="c", token_ids=[9], hidden_states=hidden),
        StageOutput(request_id="d", finished=True, finish_reason="stop"),
        StageOutput(
            request_id="e",
            finished=True,
            finish_reason="error",
            error=ErrorInfo(type="ValueError", message="bad", status_code=400),
        ),
    ]


def test_one_step_of_token_outputs_is_one_frame_without_pickle_and_round_trips():
    outs = per_token_outputs()
    data = wire.encode(wire.outputs_frame(outs, 0.5))
    tag, codes = raw_frame(data)
    assert tag == "out"
    assert wire.EXT_PICKLE not in codes
    assert codes == {wire.EXT_ARRAY, wire.EXT_HANDLE}  # the hidden states' two layers
    (body,) = wire.split(bytearray(data))
    frame = wire.decode_to_parent(body)
    assert isinstance(frame, wire.Outputs) and frame.compute_s == 0.5
    back = wire.outputs_of(frame, {})
    assert [o.request_id for o in back] == ["a", "b", "c", "d", "e"]
    assert back[0].prompt_token_ids == [1, 2, 3] and back[1].prompt_token_ids is None
    assert back[1].token_ids == [7, 8] and back[1].text == "bc"
    assert back[1].logprobs is not None and back[1].logprobs[1][9] == TokenLogprob(-1.5, 2, None)
    assert back[1].logprobs[0][5].logprob == -0.25  # vLLM's Logprob attribute names
    states = back[2].hidden_states
    assert states is not None and states.start == 3
    assert states.layers["final"].tolist() == np.arange(8).reshape(2, 4).tolist()
    assert states.layers["final"].dtype == np.float32
    assert states.layers["embeddings"] == TensorHandle("omni-x", (2, 4), "float32")
    assert back[3].finished and back[3].finish_reason == "stop" and back[3].token_ids == []
    assert back[4].error == outs[4].error


def test_requests_and_stream_inputs_are_typed_and_user_extras_are_the_pickled_part():
    params = SamplingParams(max_tokens=4, temperature=0.5, stop=["x"])
    request = StageRequest(request_id="r", prompt=[1, 2], params=params, streaming_input=True)
    data = wire.encode(wire.add_frame(request))
    assert raw_frame(data) == ("add", set())
    (body,) = wire.split(bytearray(data))
    back = wire.request_of(wire.decode_to_worker(body))  # type: ignore[arg-type]
    assert back == request
    assert raw_frame(wire.encode(wire.Input("r", wire.pack_any("more text"), False))) == (
        "input",
        set(),
    )
    # arbitrary user values (SamplingParams.extra, a multimodal prompt dict) are pickled
    rich = StageRequest(
        request_id="r",
        prompt={"prompt": "hi", "multi_modal_data": {"audio": (np.zeros(3), 16000)}},
        params=SamplingParams(extra={"vllm": {"ignore_eos": True}, "t": (1, 2)}),
    )
    data = wire.encode(wire.add_frame(rich))
    assert raw_frame(data) == ("add", {wire.EXT_PICKLE})
    (body,) = wire.split(bytearray(data))
    back = wire.request_of(wire.decode_to_worker(body))  # type: ignore[arg-type]
    assert back.params.extra == {"vllm": {"ignore_eos": True}, "t": (1, 2)}
    assert back.prompt["multi_modal_data"]["audio"][1] == 16000


def test_frames_split_across_reads_wait_for_their_last_byte():
    data = wire.encode(wire.outputs_frame(per_token_outputs(), 0.0)) * 2
    buf = bytearray(data[:10])
    assert wire.split(buf) == [] and len(buf) == 10
    buf += data[10 : len(data) - 1]
    assert len(wire.split(buf)) == 1  # the second frame lacks its last byte
    buf += data[-1:]
    assert len(wire.split(buf)) == 1 and not buf


def test_an_unknown_extension_code_is_a_decode_error():
    frame = wire.Ack(1, True, msgspec.msgpack.Ext(9, b""))
    (body,) = wire.split(bytearray(wire.encode(frame)))
    with pytest.raises(ValueError, match="unknown extension code 9"):
        wire.decode_to_parent(body)


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


def codec_pack(out: StageOutput) -> Any:
    return [out.payload.x, out.prompt_token_ids is not None]


def codec_unpack(out: StageOutput, fields: Any, state: dict[str, Any]) -> Any:
    if fields[1]:
        state[out.request_id] = "first"
    return (fields[0], state.get(out.request_id))


def test_a_payload_codec_sends_fields_and_the_client_rebuilds_the_payload():
    wire.register_codec(wire.PayloadCodec(__name__, Point, codec_pack, codec_unpack))
    outs = [
        StageOutput(request_id="r", token_ids=[1], payload=Point(4), prompt_token_ids=[9]),
        StageOutput(request_id="r", token_ids=[2], payload=Point(5)),
    ]
    data = wire.encode(wire.outputs_frame(outs, 0.0))
    assert raw_frame(data) == ("out", set())
    (body,) = wire.split(bytearray(data))
    frame = wire.decode_to_parent(body)
    assert isinstance(frame, wire.Outputs)
    state: dict[str, Any] = {}
    assert [o.payload for o in wire.outputs_of(frame, state)] == [
        (4, "first"),
        (5, "first"),
    ]


def test_audio_chunks_cross_typed_with_their_data_plane_handle():
    from omni_core.media import AudioChunk

    handle = TensorHandle("omni-audio", (480,), "float32")
    outs = [
        StageOutput(request_id="r", token_ids=[3, 4], payload=AudioChunk(handle, 24000)),
        StageOutput(request_id="s", payload=AudioChunk(np.ones(4, np.float32), 16000)),
    ]
    data = wire.encode(wire.outputs_frame(outs, 0.0))
    assert raw_frame(data) == ("out", {wire.EXT_HANDLE, wire.EXT_ARRAY})
    (body,) = wire.split(bytearray(data))
    frame = wire.decode_to_parent(body)
    assert isinstance(frame, wire.Outputs)
    first, second = wire.outputs_of(frame, {})
    assert first.payload == AudioChunk(handle, 24000) and first.token_ids == [3, 4]
    assert isinstance(second.payload, AudioChunk) and second.payload.sample_rate == 16000
    assert second.payload.samples.tolist() == [1.0, 1.0, 1.0, 1.0]


class Blob:
    def __init__(self, x: int) -> None:
        self.x = x


def test_outputs_cross_as_they_are_and_only_those_that_need_packing_are_copied() -> None:
    wire.register_codec(wire.PayloadCodec(__name__, Point, codec_pack, codec_unpack))
    hidden = HiddenStates(0, {"final": np.ones((1, 2), np.float32)})
    outs = [
        StageOutput(request_id="native", token_ids=[1], payload="text payload"),
        StageOutput(request_id="ints", payload=[1, 2, 3]),
        StageOutput(request_id="tuple", payload=(1, "a")),  # msgpack would make it a list
        StageOutput(request_id="object", payload=Blob(3)),
        StageOutput(request_id="coded", payload=Point(8), hidden_states=hidden),
        StageOutput(request_id="tuple-ids", token_ids=(4, 5)),  # type: ignore[arg-type]
        StageOutput(request_id="range-ids", token_ids=range(6, 8)),  # type: ignore[arg-type]
    ]
    frame = wire.outputs_frame(outs, 0.0)
    assert frame.outputs[0] is outs[0] and frame.outputs[1] is not outs[1]
    assert outs[4].payload.x == 8 and outs[4].hidden_states is hidden  # the worker's: untouched
    (back_frame,) = wire.parent_frames(bytearray(wire.encode(frame)))
    assert isinstance(back_frame, wire.Outputs)
    back = wire.outputs_of(back_frame, {})
    assert back[0].payload == "text payload" and back[0].token_ids == [1]
    assert back[1].payload == [1, 2, 3]
    assert back[2].payload == (1, "a")
    assert isinstance(back[3].payload, Blob) and back[3].payload.x == 3
    assert back[4].payload == (8, None)  # Point's codec (registered above)
    assert back[4].hidden_states is not None
    assert back[4].hidden_states.layers["final"].tolist() == [[1.0, 1.0]]
    assert back[5].token_ids == [4, 5]
    assert back[6].token_ids == [6, 7]  # any sequence of ints crosses as a list


def test_parent_frames_decode_every_complete_frame_in_place_and_keep_the_rest() -> None:
    small = wire.encode(wire.outputs_frame(per_token_outputs(), 0.25))
    big_array = np.arange(40000, dtype=np.float32).reshape(2, 20000)  # a body over 64 KiB
    big = wire.encode(
        wire.outputs_frame(
            [StageOutput(request_id="big", hidden_states=HiddenStates(0, {"final": big_array}))],
            0.0,
        )
    )
    data = small + big + small
    buf = bytearray(data[:10])
    assert wire.parent_frames(buf) == [] and len(buf) == 10
    buf += data[10 : len(small) + len(big) + 3]
    frames = wire.parent_frames(buf)
    assert [len(f.outputs) for f in frames] == [5, 1]  # type: ignore[union-attr]
    assert len(buf) == 3
    (big_out,) = frames[1].outputs  # type: ignore[union-attr]
    assert big_out.hidden_states.layers["final"].tolist() == big_array.tolist()
    buf += data[len(small) + len(big) + 3 :]
    (last,) = wire.parent_frames(buf)
    assert not buf and isinstance(last, wire.Outputs) and last.compute_s == 0.25
    ack = wire.encode(wire.Ack(3, True, None))
    buf += ack + ack
    assert [f.call_id for f in wire.parent_frames(buf)] == [3, 3] and not buf  # type: ignore[union-attr]


def test_an_output_msgpack_cannot_carry_fails_to_encode() -> None:
    bad = StageOutput(request_id="np", token_ids=[np.int64(3)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        wire.encode(wire.outputs_frame([bad], 0.0))
