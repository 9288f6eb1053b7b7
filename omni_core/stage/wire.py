"""The stage-process wire: typed msgspec frames between a process replica and its client.

Every frame is a length-prefixed (:data:`HEADER`) MessagePack body, one of the tagged structs
below, decoded straight into its type (no pickle on the hot path):

* parent → worker: :class:`Add` (a request), :class:`Input` (more input of a ``stream`` edge),
  :class:`Call` (ping, abort, control RPCs);
* worker → parent: :class:`Outputs` (every output of one engine step, in one frame) and
  :class:`Ack` (a call's answer).

Outputs travel as :class:`WireOutput`: token ids, text delta, finish, typed logprobs
(:class:`~omni_core.outputs.TokenLogprob`), the prompt's token ids on a request's first output,
hidden states. Arrays stay on the data plane: a :class:`~omni_core.stage.dataplane.TensorHandle`
crosses as a small extension value, and an inline array (a few rows of hidden states) as its raw
bytes. An engine's own payload type can have a :class:`PayloadCodec`: the worker sends the few
fields the payload is rebuilt from and the client builds it, only where it is wanted (vLLM's
``RequestOutput``: :mod:`omni_core.kinds.vllm_adapter`).

Pickle remains only where arbitrary user objects must pass, as an extension value inside a typed
frame: control-RPC arguments and results, ``SamplingParams.extra``, prompts that are neither
text nor token ids (multimodal dicts), and engine payloads no codec types (a diffusion
``Image``, a ``torch`` engine's own objects: their arrays are data-plane handles, so what is
pickled is small). An ``AudioChunk`` has a codec here: its handle and rate cross typed.
"""

from __future__ import annotations

import importlib
import pickle
import struct
from collections.abc import Callable
from typing import Any

import msgspec

from omni_core.outputs import ErrorInfo, HiddenStates, StageOutput, TokenLogprob
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest
from omni_core.stage.dataplane import TensorHandle

HEADER = struct.Struct("!I")

# Extension codes inside frames (any other code is a corrupt frame).
EXT_ARRAY = 1  # a numpy array: msgpack [dtype, shape] then the raw bytes
EXT_PICKLE = 2  # an arbitrary Python object (see the module docstring for where)
EXT_HANDLE = 3  # a data-plane TensorHandle (shared memory): msgpack [name, shape, dtype]


class Add(msgspec.Struct, tag="add", array_like=True, gc=False):
    request_id: str
    prompt: Any
    params: SamplingParams
    extra: Any = None  # SamplingParams.extra (arbitrary user values: pickled), None when empty
    streaming_input: bool = False
    trace_context: dict[str, str] | None = None
    stream_outputs: bool = True


class Input(msgspec.Struct, tag="input", array_like=True, gc=False):
    request_id: str
    prompt: Any
    final: bool


class Call(msgspec.Struct, tag="call", array_like=True, gc=False):
    call_id: int
    method: str  # "ping", "abort" (``ids``) or "rpc" (``args``: method, args, kwargs, pickled)
    ids: list[str] | None = None
    args: Any = None


class WireHidden(msgspec.Struct, array_like=True, gc=False):
    start: int
    layers: dict[str, Any]  # arrays or handles (extension values)


class WireOutput(msgspec.Struct, array_like=True, gc=False):
    request_id: str
    token_ids: list[int]
    text: str = ""
    finished: bool = False
    finish_reason: str | None = None
    logprobs: list[dict[int, TokenLogprob]] | None = None
    error: ErrorInfo | None = None
    hidden: WireHidden | None = None
    prompt_token_ids: list[int] | None = None
    payload: Any = None  # an untyped payload (extension value), or a codec's fields
    codec: str | None = None  # the PayloadCodec that rebuilds the payload from ``payload``


class Outputs(msgspec.Struct, tag="out", array_like=True, gc=False):
    outputs: list[WireOutput]
    compute_s: float


class Ack(msgspec.Struct, tag="ack", array_like=True, gc=False):
    call_id: int
    ok: bool
    value: Any  # the result (pickled), or [error type, message]


ToWorker = Add | Input | Call
ToParent = Outputs | Ack


class PayloadCodec:
    """Carries one engine payload type as plain fields: ``pack(output)`` (in the worker) returns
    msgpack-native values for ``output.payload``; ``unpack(output, fields, state)`` (in the
    client) rebuilds the payload from them and the output; ``state`` is a dict the client keeps
    per replica, keyed by request id (dropped at abort; e.g. a request's prompt ids, sent once).
    Register with :func:`register_codec` in the module named ``name``: the client imports that
    module when it first meets the codec."""

    def __init__(
        self,
        name: str,
        payload_type: type,
        pack: Callable[[StageOutput], Any],
        unpack: Callable[[StageOutput, Any, dict[str, Any]], Any],
    ) -> None:
        self.name = name
        self.payload_type = payload_type
        self.pack = pack
        self.unpack = unpack


_CODECS: dict[str, PayloadCodec] = {}
_CODEC_BY_TYPE: dict[type, PayloadCodec] = {}


def register_codec(codec: PayloadCodec) -> None:
    _CODECS[codec.name] = codec
    _CODEC_BY_TYPE[codec.payload_type] = codec


def _codec(name: str) -> PayloadCodec:
    codec = _CODECS.get(name)
    if codec is None:
        importlib.import_module(name)
        codec = _CODECS[name]
    return codec


def _pack_audio(out: StageOutput) -> Any:
    chunk = out.payload
    return [pack_any(chunk.samples), chunk.sample_rate]


def _unpack_audio(out: StageOutput, fields: Any, state: dict[str, Any]) -> Any:
    from omni_core.media import AudioChunk

    return AudioChunk(fields[0], fields[1])


def _register_media() -> None:
    """Audio chunks (the vocoder's, token2wav's: a data-plane handle and a rate) cross typed."""
    from omni_core.media import AudioChunk

    register_codec(PayloadCodec(__name__, AudioChunk, _pack_audio, _unpack_audio))


# --- values of Any-typed fields ---------------------------------------------------------------
def _is_ints(value: list[Any]) -> bool:
    for item in value:
        if type(item) is not int:
            return False
    return True


def pack_any(value: Any) -> Any:
    """``value`` as msgpack-native data where that loses nothing, else an extension value."""
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return value
    if kind is list and _is_ints(value):
        return value
    if kind is TensorHandle and value.ref is None:
        return msgspec.msgpack.Ext(EXT_HANDLE, _META.encode((value.name, value.shape, value.dtype)))
    if kind.__module__ == "numpy" and kind.__name__ == "ndarray" and not value.dtype.hasobject:
        return _pack_array(value)
    return msgspec.msgpack.Ext(EXT_PICKLE, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


_META = msgspec.msgpack.Encoder()
_META_DEC = msgspec.msgpack.Decoder()
_LEN = struct.Struct("!H")


def _pack_array(array: Any) -> msgspec.msgpack.Ext:
    import numpy as np

    array = np.ascontiguousarray(array)
    meta = _META.encode((array.dtype.str, array.shape))
    return msgspec.msgpack.Ext(EXT_ARRAY, _LEN.pack(len(meta)) + meta + array.tobytes())


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == EXT_ARRAY:
        import numpy as np

        (size,) = _LEN.unpack_from(data)
        dtype, shape = _META_DEC.decode(data[_LEN.size : _LEN.size + size])
        raw = bytes(data[_LEN.size + size :])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if code == EXT_HANDLE:
        name, shape, dtype = _META_DEC.decode(data)
        return TensorHandle(name, tuple(shape), dtype)
    if code == EXT_PICKLE:
        return pickle.loads(data)
    raise ValueError(f"unknown extension code {code} in a stage frame")


_register_media()
_ENCODER = msgspec.msgpack.Encoder()
_TO_WORKER = msgspec.msgpack.Decoder(ToWorker, ext_hook=_ext_hook)
_TO_PARENT = msgspec.msgpack.Decoder(ToParent, ext_hook=_ext_hook)


def encode(frame: msgspec.Struct) -> bytes:
    """One frame: the length prefix, then its MessagePack body."""
    body = _ENCODER.encode(frame)
    return HEADER.pack(len(body)) + body


def decode_to_worker(body: bytes | bytearray | memoryview) -> Add | Input | Call:
    return _TO_WORKER.decode(body)


class _AddId(msgspec.Struct, tag="add", array_like=True):
    """The request id of an ``add`` frame whose other fields did not validate."""

    request_id: str
    prompt: Any
    params: Any


_ADD_ID = msgspec.msgpack.Decoder(_AddId, ext_hook=_ext_hook)


def add_request_id(body: bytes | bytearray | memoryview) -> str | None:
    """The request id of an ``add`` frame that :func:`decode_to_worker` refused (a field out of
    range, e.g. a sampling param a plugin set unchecked), else None: a corrupt frame."""
    try:
        return _ADD_ID.decode(body).request_id
    except msgspec.DecodeError:
        return None


def decode_to_parent(body: bytes | bytearray | memoryview) -> Outputs | Ack:
    return _TO_PARENT.decode(body)


def split(buf: bytearray) -> list[bytearray]:
    """The bodies of every complete frame at the start of ``buf`` (copies); removes them from
    ``buf``, leaving an incomplete frame's bytes for the next read."""
    offset = 0
    bodies = []
    size_all = len(buf)
    unpack = HEADER.unpack_from
    while size_all - offset >= HEADER.size:
        (size,) = unpack(buf, offset)
        end = offset + HEADER.size + size
        if size_all < end:
            break
        bodies.append(buf[offset + HEADER.size : end])
        offset = end
    if offset:
        del buf[:offset]
    return bodies


# --- requests -----------------------------------------------------------------------------------
def add_frame(request: StageRequest) -> Add:
    params = request.params
    extra = None
    if params.extra:
        extra = pack_any(params.extra)
        params = msgspec.structs.replace(params, extra={})
    return Add(
        request.request_id,
        pack_any(request.prompt),
        params,
        extra,
        request.streaming_input,
        request.trace_context,
        request.stream_outputs,
    )


def request_of(frame: Add) -> StageRequest:
    params = frame.params
    if frame.extra is not None:
        params = msgspec.structs.replace(params, extra=frame.extra)
    return StageRequest(
        request_id=frame.request_id,
        prompt=frame.prompt,
        params=params,
        streaming_input=frame.streaming_input,
        trace_context=frame.trace_context,
        stream_outputs=frame.stream_outputs,
    )


# --- outputs ------------------------------------------------------------------------------------
def wire_output(out: StageOutput) -> WireOutput:
    hidden = None
    if out.hidden_states is not None:
        layers = {k: pack_any(v) for k, v in out.hidden_states.layers.items()}
        hidden = WireHidden(out.hidden_states.start, layers)
    payload, codec_name = out.payload, None
    if payload is not None:
        codec = _CODEC_BY_TYPE.get(type(payload))
        if codec is not None:
            payload, codec_name = codec.pack(out), codec.name
        else:
            payload = pack_any(payload)
    return WireOutput(
        out.request_id,
        out.token_ids if type(out.token_ids) is list else list(out.token_ids),
        out.text or "",
        out.finished,
        out.finish_reason,
        out.logprobs,
        out.error,
        hidden,
        out.prompt_token_ids,
        payload,
        codec_name,
    )


def outputs_frame(outs: list[StageOutput], compute_s: float) -> Outputs:
    return Outputs([wire_output(out) for out in outs], compute_s)


def stage_output(wire: WireOutput, codec_state: dict[str, Any]) -> StageOutput:
    """The client's :class:`StageOutput` of a wire output (payload rebuilt by its codec)."""
    hidden = None
    if wire.hidden is not None:
        hidden = HiddenStates(wire.hidden.start, wire.hidden.layers)
    out = StageOutput(
        request_id=wire.request_id,
        token_ids=wire.token_ids,
        text=wire.text,
        finished=wire.finished,
        finish_reason=wire.finish_reason,
        logprobs=wire.logprobs,
        error=wire.error,
        hidden_states=hidden,
        prompt_token_ids=wire.prompt_token_ids,
    )
    if wire.codec is not None:
        out.payload = _codec(wire.codec).unpack(out, wire.payload, codec_state)
    else:
        out.payload = wire.payload
    return out


__all__ = [
    "EXT_ARRAY",
    "EXT_HANDLE",
    "EXT_PICKLE",
    "HEADER",
    "Ack",
    "Add",
    "Call",
    "Input",
    "Outputs",
    "PayloadCodec",
    "WireOutput",
    "add_frame",
    "decode_to_parent",
    "decode_to_worker",
    "encode",
    "outputs_frame",
    "pack_any",
    "register_codec",
    "request_of",
    "split",
    "stage_output",
]
