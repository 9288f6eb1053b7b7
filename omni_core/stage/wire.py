"""The stage-process wire: typed msgspec frames between a process replica and its client.

Every frame is a length-prefixed (:data:`HEADER`) MessagePack body, one of the tagged structs
below, decoded straight into its type (no pickle on the hot path):

* parent → worker: :class:`Add` (a request), :class:`Input` (more input of a ``stream`` edge),
  :class:`Call` (ping, abort, control RPCs);
* worker → parent: :class:`Outputs` (every output of one engine step, in one frame) and
  :class:`Ack` (a call's answer).

Outputs travel as the worker's own :class:`~omni_core.outputs.StageOutput` structs (a
MessagePack array of their fields: token ids, text delta, finish, typed logprobs, the prompt's
token ids on a request's first output, hidden states), decoded straight into that type in the
client: no parallel struct is built per output on either side. Arrays stay on the data plane: a
:class:`~omni_core.stage.dataplane.TensorHandle` crosses as a small extension value, and an inline
array (a few rows of hidden states) as its raw bytes; only an output with such values, or with a
payload msgpack cannot carry as it is, crosses as a packed copy. An engine's own payload type can
have a :class:`PayloadCodec`: the worker sends the few fields the payload is rebuilt from (in
:attr:`Outputs.codecs`) and the client builds it (vLLM's ``RequestOutput``: built when first
read, :mod:`omni_core.kinds.vllm_adapter`).

Pickle remains only where arbitrary user objects must pass, as an extension value inside a typed
frame: control-RPC arguments and results, ``SamplingParams.extra``, prompts that are neither
text nor token ids (multimodal dicts), and engine payloads no codec types (a diffusion
``Image``, a ``torch`` engine's own objects: their arrays are data-plane handles, so what is
pickled is small). An ``AudioChunk`` has a codec here: its handle and rate cross typed. A
prompt's large images and arrays are written to shared-memory files first, in a thread of the
client (:mod:`omni_core.stage.shared_media`): its pickle only names them.
"""

from __future__ import annotations

import importlib
import pickle
import struct
from collections.abc import Callable
from typing import Any

import msgspec

from omni_core.outputs import HiddenStates, StageOutput
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


class Outputs(msgspec.Struct, tag="out", array_like=True, gc=False):
    """Every output of one engine step. ``outputs`` are the worker's own
    :class:`~omni_core.outputs.StageOutput` structs, encoded as they are (a payload a
    :class:`PayloadCodec` carries is left out of them); ``codecs``, when any output has such a
    payload, holds per output ``None`` or ``[codec name, fields]``."""

    outputs: list[StageOutput]
    compute_s: float
    codecs: list[Any] | None = None


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
    module when it first meets the codec. ``holds_handles=False`` says the rebuilt payload never
    holds a data-plane handle: the client then skips looking for any in it (per token)."""

    def __init__(
        self,
        name: str,
        payload_type: type,
        pack: Callable[[StageOutput], Any],
        unpack: Callable[[StageOutput, Any, dict[str, Any]], Any],
        holds_handles: bool = True,
    ) -> None:
        self.name = name
        self.holds_handles = holds_handles
        self.payload_type = payload_type
        self.pack = pack
        self.unpack = unpack
        # msgpack would encode such a payload itself (its fields): its output is sent as a copy
        # without it, where another type's payload is simply left out (see ``_enc_hook``)
        self.encodable = _natively_encodable(payload_type)


def _natively_encodable(kind: type) -> bool:
    """Whether msgspec encodes instances of ``kind`` without asking its ``enc_hook``."""
    import dataclasses
    import datetime
    import decimal
    import enum
    import uuid

    native: tuple[type, ...] = (msgspec.Struct, tuple, list, dict, set, frozenset, str, bytes)
    native += (bytearray, int, float, enum.Enum, datetime.date, datetime.time, decimal.Decimal)
    native += (uuid.UUID,)
    return (
        dataclasses.is_dataclass(kind)
        or hasattr(kind, "__attrs_attrs__")
        or issubclass(kind, native)
    )


_CODECS: dict[str, PayloadCodec] = {}
_CODEC_BY_TYPE: dict[type, PayloadCodec] = {}


# Payload types in which the client need not look for data-plane handles (``materialize``).
HANDLE_FREE: set[type] = {str, int, float, bool}


def register_codec(codec: PayloadCodec) -> None:
    _CODECS[codec.name] = codec
    _CODEC_BY_TYPE[codec.payload_type] = codec
    if not codec.holds_handles:
        HANDLE_FREE.add(codec.payload_type)


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


def _enc_hook(value: Any) -> Any:
    """A payload its codec carries (in :attr:`Outputs.codecs`) is left out of its output."""
    if type(value) in _CODEC_BY_TYPE:
        return None
    raise TypeError(f"{type(value).__name__} cannot cross the stage-process wire")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_TO_WORKER = msgspec.msgpack.Decoder(ToWorker, ext_hook=_ext_hook)
_TO_PARENT = msgspec.msgpack.Decoder(ToParent, ext_hook=_ext_hook)


def encode(frame: msgspec.Struct) -> bytes:
    """One frame: the length prefix, then its MessagePack body."""
    body = _ENCODER.encode(frame)
    return HEADER.pack(len(body)) + body


def encode_large(frame: msgspec.Struct) -> bytearray:
    """:func:`encode` for a large frame (run off the event loop): one buffer, no copy of the body
    to prepend its length."""
    buf = bytearray(HEADER.size)
    _ENCODER.encode_into(frame, buf, HEADER.size)
    HEADER.pack_into(buf, 0, len(buf) - HEADER.size)
    return buf


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


_LARGE = 1 << 16  # a body this large is decoded in place (a view), a smaller one from a copy


def parent_frames(buf: bytearray) -> list[Outputs | Ack]:
    """Every complete frame at the start of ``buf``, decoded; removes them from ``buf``, leaving
    an incomplete frame's bytes for the next read. The parent's read path: one call per read,
    no list of bodies; a small body is decoded from a copy (cheaper than a view of it), a large
    one in place."""
    decode = _TO_PARENT.decode
    size_all = len(buf)
    if size_all >= HEADER.size:  # the common read: exactly one small frame
        (size,) = HEADER.unpack_from(buf)
        if size + HEADER.size == size_all and size < _LARGE:
            frame = decode(buf[HEADER.size :])
            buf.clear()
            return [frame]
    frames: list[Outputs | Ack] = []
    offset = 0
    while size_all - offset >= HEADER.size:
        (size,) = HEADER.unpack_from(buf, offset)
        start = offset + HEADER.size
        end = start + size
        if size_all < end:
            break
        if size < _LARGE:
            frames.append(decode(buf[start:end]))
        else:
            with memoryview(buf) as view, view[start:end] as body:
                frames.append(decode(body))
        offset = end
    if offset == size_all:
        buf.clear()
    elif offset:
        del buf[:offset]
    return frames


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
# Payload types msgpack carries as they are (a list only when all its items are ints).
_NATIVE = (str, int, float, bool)
_UNPACKED = object()  # (a payload that needs packing)


def _packed_output(out: StageOutput) -> StageOutput:
    """``out`` as it crosses the wire when its payload has no codec or it has hidden states: a
    copy whose payload and hidden-state arrays are msgpack-native or extension values (the
    worker's own output is left as it is)."""
    payload = out.payload
    if type(payload) in _CODEC_BY_TYPE:
        payload = None  # in the frame's ``codecs``
    elif payload is not None:
        payload = pack_any(payload)
    hidden = out.hidden_states
    if hidden is not None:
        hidden = HiddenStates(hidden.start, {k: pack_any(v) for k, v in hidden.layers.items()})
    token_ids = out.token_ids if type(out.token_ids) is list else list(out.token_ids)
    return msgspec.structs.replace(
        out, payload=payload, hidden_states=hidden, token_ids=token_ids, text=out.text or ""
    )


def outputs_frame(outs: list[StageOutput], compute_s: float) -> Outputs:
    """The frame of one step's outputs. Outputs cross as the worker's own structs (no copy per
    output) except where a payload without codec or hidden states need packing."""
    codecs: list[Any] | None = None
    sent = outs
    for i, out in enumerate(outs):
        payload = out.payload
        if payload is not None:
            codec = _CODEC_BY_TYPE.get(type(payload))
            if codec is not None:
                if codecs is None:
                    codecs = [None] * len(outs)
                codecs[i] = [codec.name, codec.pack(out)]
                if codec.encodable:
                    payload = _UNPACKED
            elif type(payload) not in _NATIVE:
                payload = _UNPACKED
        if (
            payload is not _UNPACKED
            and out.hidden_states is None
            and out.text is not None
            and type(out.token_ids) is list
        ):
            continue  # crosses as it is
        if sent is outs:
            sent = list(outs)
        sent[i] = _packed_output(out)
    return Outputs(sent, compute_s, codecs)


def outputs_of(frame: Outputs, codec_state: dict[str, Any]) -> list[StageOutput]:
    """The client's outputs of a decoded frame: its structs, each codec's payload rebuilt
    (``codec_state``: the codecs' per-request state of this replica)."""
    outs = frame.outputs
    codecs = frame.codecs
    if codecs is not None:
        for i, packed in enumerate(codecs):  # (zip costs more per output than indexing)
            if packed is not None:
                out = outs[i]
                codec = _CODECS.get(packed[0]) or _codec(packed[0])
                out.payload = codec.unpack(out, packed[1], codec_state)
    return outs


__all__ = [
    "EXT_ARRAY",
    "EXT_HANDLE",
    "EXT_PICKLE",
    "HANDLE_FREE",
    "HEADER",
    "Ack",
    "Add",
    "Call",
    "Input",
    "Outputs",
    "PayloadCodec",
    "add_frame",
    "decode_to_parent",
    "decode_to_worker",
    "encode",
    "encode_large",
    "outputs_frame",
    "outputs_of",
    "pack_any",
    "parent_frames",
    "register_codec",
    "request_of",
    "split",
]
