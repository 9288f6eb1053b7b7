"""``POST /v1/audio/speech`` (OpenAI's shape, as the official ``openai`` client sends it) and
``GET /v1/audio/voices`` on a pipeline whose first stage is the Qwen3-TTS talker.

* ``input`` (1..4096 characters), ``model`` (any: the served pipeline speaks), ``voice`` (a name
  or ``{"id": name}``: a speaker of the custom-voice checkpoint, case-insensitive; OpenAI's
  built-in names map to the pipeline's default voice; another name is a 400 listing the voices),
  ``instructions`` (custom voice: optional style; voice design: required, it describes the
  voice), ``response_format`` (``wav`` default, ``pcm`` (16-bit LE mono), ``flac``, ``opus``
  (soundfile/libsndfile); ``mp3`` and ``aac`` are a 400: no maintained encoder here),
  ``speed`` (only 1.0: Qwen3-TTS has no speed control; other values a 400), ``stream_format``
  (``audio``: the body's bytes as they are decoded, for ``wav``/``pcm``; ``sse``:
  ``speech.audio.delta`` events with base64 audio then ``speech.audio.done``, ``wav``/``pcm``).
* vllm-omni's extensions: ``language`` (a codec language of the checkpoint, default ``auto``),
  ``task_type`` (``CustomVoice``/``VoiceDesign``: must be the served checkpoint's), ``seed``,
  ``max_new_tokens`` (frames, 12.5 per second); on a voice-clone pipeline ``ref_audio`` (base64
  audio or a ``data:`` URL, within ``OMNI_MAX_AUDIO_BYTES``/``_SECONDS``): with ``ref_text``
  ICL mode (the reference's codes and text in the prompt), without it (or with
  ``x_vector_only_mode: true``) x-vector mode.

The talker's own checks (an unknown voice or language) come back before the body starts: the
first output is awaited, so they are 400s naming the field, never a broken stream. A streamed
WAV's header carries the sizes ``0xFFFFFFFF`` (the length is unknown when it is sent).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

logger = logging.getLogger(__name__)

OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "opus": "audio/ogg",
}
TASK_TYPES = {"CustomVoice": "custom_voice", "VoiceDesign": "voice_design", "Base": "base"}
TALKER_ENGINE = "omni_qwen3_tts.talker:build"


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)


class SpeechRequest(BaseModel):
    """The body of ``POST /v1/audio/speech``."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1, max_length=4096)
    model: str | None = None
    voice: str | VoiceId | None = None
    instructions: str | None = Field(default=None, max_length=4096)
    response_format: Literal["wav", "pcm", "flac", "opus", "mp3", "aac"] = "wav"
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    language: str | None = None
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    max_new_tokens: int | None = Field(default=None, ge=1, le=8192)
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None


class Speaker:
    """What the served checkpoint offers (read from its ``config.json``, no torch)."""

    def __init__(self, engine: Any, stage: Any) -> None:
        self.engine, self.stage = engine, stage
        self.options = dict(stage.args.options or {})
        self._config: dict[str, Any] | None = None

    def config(self) -> dict[str, Any]:
        if self._config is None:
            from omni_core.extend import stage_model
            from omni_qwen3_tts.model import checkpoint_dir

            model = stage_model(self.stage.config) or self.stage.args.model
            path = checkpoint_dir(Path(str(model)), self.options.get("model_type"))
            self._config = json.loads((path / "config.json").read_text())
        return self._config

    @property
    def model_type(self) -> str:
        return str(self.config().get("tts_model_type"))

    def voices(self) -> list[str]:
        return sorted(str(k).lower() for k in self.config()["talker_config"].get("spk_id") or {})

    def default_voice(self) -> str | None:
        return self.options.get("voice")


def _error(status: int, message: str, param: str | None = None) -> Exception:
    from omni_core.extend import ApiError

    return ApiError(status, message, param=param)


def extra_for(body: SpeechRequest, speaker: Speaker) -> dict[str, Any]:
    """The stages' ``extra`` for ``body``; a 400 naming the field for what cannot be served."""
    from omni_core.extend import AUDIO_OPTIONS

    fmt = body.response_format
    if fmt not in MEDIA_TYPES:
        raise _error(
            400,
            f"response_format: {fmt!r} has no encoder here; use one of {', '.join(MEDIA_TYPES)}",
            "response_format",
        )
    if body.stream_format == "sse" and fmt not in ("wav", "pcm"):
        raise _error(400, "stream_format 'sse' needs response_format wav or pcm", "stream_format")
    if body.speed != 1.0:
        raise _error(400, f"speed: {body.speed}: Qwen3-TTS speaks at 1.0 only", "speed")
    kind = speaker.model_type
    if body.task_type is not None and TASK_TYPES[body.task_type] != kind:
        raise _error(
            400, f"task_type: {body.task_type!r}, but the served model is {kind}", "task_type"
        )
    if not body.input.strip():
        raise _error(400, "input: the text to speak is empty", "input")
    extra: dict[str, Any] = {}
    if kind == "base":
        extra["ref_audio"] = check_reference(body, speaker.engine)
        if body.ref_text and body.x_vector_only_mode is not True:  # ICL mode
            extra["ref_text"] = body.ref_text
    elif body.ref_audio is not None:
        raise _error(400, f"ref_audio: the served model is {kind}, not a voice clone", "ref_audio")
    name = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
    if kind == "custom_voice":
        voices = speaker.voices()
        if name is None or name.lower() in OPENAI_VOICES:
            name = speaker.default_voice()
        if name is None or name.lower() not in voices:
            raise _error(
                400, f"voice: unknown voice {name!r}; available: {', '.join(voices)}", "voice"
            )
        extra["voice"] = name.lower()
    elif name is not None and name.lower() not in OPENAI_VOICES:
        raise _error(400, f"voice: a {kind} model has no named voices (got {name!r})", "voice")
    if body.instructions:
        extra["instructions"] = body.instructions
    if body.language:
        extra["language"] = body.language
    streamed = fmt in ("wav", "pcm")
    extra[AUDIO_OPTIONS] = {"stream": streamed}  # the decoder streams wav/pcm as it decodes
    return extra


def check_reference(body: SpeechRequest, engine: Any) -> str:
    """A voice-clone request's ``ref_audio`` (base64 audio, a ``data:`` URL too) within the
    server's media budgets (``OMNI_MAX_AUDIO_BYTES``, ``OMNI_MAX_AUDIO_SECONDS``); a 400 naming
    the field otherwise (``x_vector_only_mode: false`` needs a ``ref_text``)."""
    import binascii

    import soundfile

    if body.x_vector_only_mode is False and not body.ref_text:
        raise _error(
            400, "ref_text: ICL voice clone (x_vector_only_mode false) needs it", "ref_text"
        )
    if not body.ref_audio:
        raise _error(400, "ref_audio: a voice-clone model needs reference audio", "ref_audio")
    settings = getattr(engine, "settings", None)
    max_bytes = int(getattr(settings, "max_audio_bytes", 128 << 20))
    max_seconds = float(getattr(settings, "max_audio_seconds", 600.0))
    data = body.ref_audio.split(",", 1)[1] if body.ref_audio.startswith("data:") else body.ref_audio
    if len(data) * 3 // 4 > max_bytes:
        raise _error(400, f"ref_audio: over {max_bytes} bytes (OMNI_MAX_AUDIO_BYTES)", "ref_audio")
    try:
        info = soundfile.info(io.BytesIO(base64.b64decode(data, validate=True)))
    except (binascii.Error, ValueError, RuntimeError) as exc:
        raise _error(
            400, f"ref_audio: not base64 audio soundfile reads: {exc}", "ref_audio"
        ) from None
    if info.duration > max_seconds:
        raise _error(
            400,
            f"ref_audio: {info.duration:.1f} s, over {max_seconds:g} s (OMNI_MAX_AUDIO_SECONDS)",
            "ref_audio",
        )
    return data


def wav_header(rate: int, size: int = 0xFFFFFFFF) -> bytes:
    """A 16-bit mono PCM WAV header (``size``: the data bytes; unknown: ``0xFFFFFFFF``)."""
    riff = size + 36 if size != 0xFFFFFFFF else 0xFFFFFFFF
    return (
        b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data" + struct.pack("<I", size)
    )  # fmt: skip


def encode(samples: Any, rate: int, fmt: str) -> bytes:
    """Whole audio as ``fmt`` (flac/opus through soundfile)."""
    import soundfile

    buffer = io.BytesIO()
    kind = {"flac": ("FLAC", "PCM_16"), "opus": ("OGG", "OPUS")}[fmt]
    soundfile.write(buffer, samples, rate, format=kind[0], subtype=kind[1])
    return buffer.getvalue()


def pcm16(samples: Any) -> bytes:
    """Float samples in [-1, 1] as little-endian 16-bit PCM."""
    import numpy as np

    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767).astype("<i2").tobytes()


async def open_speech(
    engine: Any, speaker: Speaker, body: SpeechRequest
) -> AsyncIterator[tuple[Any, int]]:
    """The audio of ``body`` as ``(float32 samples, rate)`` pieces as they are decoded. The first
    output is awaited before the first piece: the talker's own errors (an unknown voice) raise
    an :class:`ApiError` before anything is sent."""
    extra = extra_for(body, speaker)
    talker: dict[str, Any] = {}
    if body.seed is not None:
        talker["seed"] = body.seed
    if body.max_new_tokens is not None:
        talker["max_tokens"] = body.max_new_tokens
    try:
        params = engine.request_params({speaker.stage.name: talker}, extra=extra)
    except ValueError as exc:
        raise _error(400, str(exc), getattr(exc, "param", None)) from None
    outputs = engine.generate(body.input, sampling_params=params)
    try:
        out = await anext(outputs)
        if out.error is not None:
            raise _error(out.error.status_code, out.error.message, out.error.param)
        while True:
            if out.error is not None:
                raise RuntimeError(out.error.message)  # after the head: the stream breaks
            payload = out.payload
            if payload is not None and hasattr(payload, "samples"):
                yield payload.samples, int(payload.sample_rate)
            if out.finished:
                return
            try:
                out = await anext(outputs)
            except StopAsyncIteration:
                return
    finally:
        await outputs.aclose()


async def speak(engine: Any, speaker: Speaker, body: SpeechRequest) -> Response:
    fmt = body.response_format
    pieces = open_speech(engine, speaker, body)
    try:  # the head first: errors before the response starts are 4xx
        head = await anext(pieces)
    except StopAsyncIteration:
        head = None

    async def chunks() -> AsyncIterator[tuple[Any, int]]:
        if head is not None:
            yield head
            async for piece in pieces:
                yield piece

    if fmt not in ("wav", "pcm"):
        import numpy as np

        whole = [(s, r) async for s, r in chunks()]
        rate = whole[0][1] if whole else 24000
        samples = np.concatenate([s for s, _ in whole]) if whole else np.zeros(0, np.float32)
        return Response(encode(samples, rate, fmt), media_type=MEDIA_TYPES[fmt])

    async def audio() -> AsyncIterator[bytes]:
        header = fmt == "wav"
        async for samples, rate in chunks():
            data = pcm16(samples)
            if header:
                data, header = wav_header(rate) + data, False
            yield data

    if body.stream_format == "audio":
        return StreamingResponse(audio(), media_type=MEDIA_TYPES[fmt])

    async def events() -> AsyncIterator[bytes]:
        async for data in audio():
            delta = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
            yield f"data: {json.dumps(delta)}\n\n".encode()
        tokens = len(body.input.split())
        usage = {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens}
        yield f"data: {json.dumps({'type': 'speech.audio.done', 'usage': usage})}\n\n".encode()

    return StreamingResponse(events(), media_type="text/event-stream")


async def parse(request: Request) -> SpeechRequest:
    """The JSON body as :class:`SpeechRequest`; one 400 naming the first bad field."""
    try:
        data = await request.json()
    except ValueError as exc:
        raise _error(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _error(400, "the body must be a JSON object")
    try:
        return SpeechRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else "body"
        raise _error(400, f"{where}: {first['msg']}", where) from None


def mount(app: Any, engine: Any) -> None:
    """Add the speech routes when the served pipeline's first stage is the Qwen3-TTS talker."""
    stages = getattr(getattr(engine, "pipeline", None), "stages", {})
    talkers = [
        s
        for s in stages.values()
        if getattr(getattr(s, "args", None), "engine", None) == TALKER_ENGINE
    ]
    if not talkers:
        return
    speaker = Speaker(engine, talkers[0])

    @app.post("/v1/audio/speech")
    async def create_speech(request: Request) -> Response:
        return await speak(engine, speaker, await parse(request))

    from omni_qwen3_tts.speech_stream import mount_stream

    mount_stream(app, engine, speaker)

    @app.get("/v1/audio/voices")
    async def list_voices() -> dict[str, Any]:
        return {
            "model_type": speaker.model_type,
            "voices": speaker.voices(),
            "default": speaker.default_voice(),
            "openai_voices_map_to_default": sorted(OPENAI_VOICES),
        }
