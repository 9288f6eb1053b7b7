"""Qwen3-TTS's 12 Hz speech decoder as a ``torch``-kind stage engine: codec frames → 24 kHz audio.

``build(config)``: ``{"model": <checkpoint dir>, "threads": n, "options": {...}}``; it loads the
checkpoint's ``speech_tokenizer/`` through the official classes (:mod:`.shim`).

**Request.** ``prompt``: codec ids, ``num_quantizers`` per frame (what the talker emits), in
chunks on a ``stream`` edge. An id outside ``[0, codebook_size)`` is a 400.

The decoder is strictly causal with no look-ahead: ``n`` frames → ``n x 1920`` samples. **Whole**
(default): one decode once the codes are final, as the official ``decode`` (its
``chunked_decode(300, 25)`` is one forward up to 300 frames). **Streamed** (the generic audio
option ``stream`` or ``extra["audio_stream"]``, :func:`~omni_core.family.audio_streamed`): every
``options.chunk_frames`` frames are decoded as they arrive with ``left_context`` frames of
context (the family kit's :func:`~omni_core.family.causal_piece`), gap-free. The default left
context is the decoder's receptive field (:func:`exact_left_context`: its sliding-window layers'
reach plus the convolutions'), from which a stream equals the whole decode to float rounding;
a smaller ``options.left_context`` is cheaper with the error docs/models.md measures.

**Output.** ``StageOutput``s with an :class:`~omni_core.extend.AudioChunk` (float32 mono).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_core.family import audio_streamed, causal_piece, exact_context, local_checkpoint

logger = logging.getLogger(__name__)

# frames the decoder's convolutions reach back (pre_conv k=3, the ConvNeXt and decoder blocks'
# causal convolutions, in frames), measured: tests/test_qwen3_tts_decoder.py proves the stream
# exact from exact_left_context on, and not exact one frame below it
CONV_FRAMES = 6


def exact_left_context(config: Any) -> int:
    """Left context (frames) from which a streamed decode is exact for a decoder ``config``:
    ``layers x (sliding_window - 1)`` plus :data:`CONV_FRAMES` (tiny: 2 x 7 + 6 = 20; real:
    8 x 71 + 6 = 574)."""
    return exact_context(int(config.num_hidden_layers), int(config.sliding_window), CONV_FRAMES)


class DecoderOptions(BaseModel):
    """``engine_args.options`` of a Qwen3-TTS decoder stage."""

    model_config = ConfigDict(extra="forbid")

    model_type: str = Field(default="custom_voice", description="the tiny build's subfolder")
    chunk_frames: int = Field(default=4, ge=1, description="frames per streamed chunk")
    left_context: int | None = Field(
        default=None, ge=1, description="past frames a streamed chunk sees (None: exact)"
    )


@dataclass
class _Utterance:
    stream: bool
    codes: list[int] = field(default_factory=list)
    final: bool = False
    voiced: int = 0


def load_decoder(path: Any) -> tuple[Any, Any]:
    """The 12 Hz decoder module and the speech tokenizer's config, from ``path``'s
    ``speech_tokenizer/``."""
    import torch

    from omni_qwen3_tts.shim import import_qwen_tts, restore_rope

    import_qwen_tts()
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    speech = Qwen3TTSTokenizerV2Model.from_pretrained(
        str(path / "speech_tokenizer"), dtype=torch.float32
    )
    restore_rope(speech)
    return speech.decoder.eval(), speech.config


class DecoderEngine(TorchStageEngine):
    kind = "qwen3-tts decoder"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        from omni_core.extend import default_plane
        from omni_qwen3_tts.model import checkpoint_dir

        try:
            self.options = DecoderOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError([f"qwen3-tts decoder options: {exc}"]) from None
        if not config.get("model"):
            raise ConfigError(["the qwen3-tts decoder needs engine_args.model"])
        self.torch = torch
        path = checkpoint_dir(local_checkpoint(str(config["model"])), self.options.model_type)
        self.decoder, speech = load_decoder(path)
        dc = speech.decoder_config
        self.groups = int(dc.num_quantizers)
        self.codebook = int(dc.codebook_size)
        self.rate = int(speech.output_sample_rate)
        self.upsample = int(speech.decode_upsample_rate)
        self.left_context = self.options.left_context or exact_left_context(dc)
        self.plane = default_plane()
        self.requests: dict[str, _Utterance] = {}

    def add(self, request: Any) -> None:
        state = _Utterance(stream=audio_streamed(request.params.extra, stage="qwen3-tts decoder"))
        self._extend(request.request_id, state, request.prompt)
        state.final = not request.streaming_input
        self.requests[request.request_id] = state

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.requests.get(request_id)
        if state is None or state.final:
            return
        self._extend(request_id, state, prompt)
        state.final = final

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def _ready(self, state: _Utterance) -> bool:
        if state.final:
            return True
        frames = len(state.codes) // self.groups
        return state.stream and frames - state.voiced >= self.options.chunk_frames

    def has_work(self) -> bool:
        return any(self._ready(s) for s in self.requests.values())

    def step(self) -> list[StageOutput]:
        """One whole utterance or one streamed chunk of every ready request."""
        outputs = []
        for rid, state in list(self.requests.items()):
            if not self._ready(state):
                continue
            try:
                out = self._decode(rid, state)
            except Exception as exc:
                logger.warning("request %s failed in the qwen3-tts decoder", rid, exc_info=True)
                self.requests.pop(rid, None)
                outputs.append(error_output(rid, exc))
                continue
            if out.finished:
                self.requests.pop(rid, None)
            outputs.append(out)
        return outputs

    def decode(self, codes: Any) -> Any:
        """``[1, groups, frames]`` codes → ``[frames x 1920]`` samples (one forward)."""
        with self.torch.inference_mode():
            return self.decoder(codes).reshape(-1)

    def _decode(self, rid: str, state: _Utterance) -> StageOutput:
        import numpy as np

        from omni_core.extend import AudioChunk

        torch = self.torch
        frames = len(state.codes) // self.groups
        if state.final and len(state.codes) % self.groups:
            raise RequestError(
                f"qwen3-tts decoder: request {rid!r}: {len(state.codes)} codes are not whole "
                f"frames of {self.groups}"
            )
        start = state.voiced if state.stream else 0
        end = frames if state.final else start + self.options.chunk_frames
        codes = torch.tensor(state.codes[: end * self.groups], dtype=torch.long)
        codes = codes.reshape(1, -1, self.groups).transpose(1, 2)
        if end > start:
            wav = causal_piece(self.decode, codes, start, end, self.left_context, self.upsample, 0)
            wave = wav.to(torch.float32).numpy()
        else:
            wave = np.zeros(0, dtype=np.float32)
        state.voiced = end
        done = state.final and end == frames
        return StageOutput(
            request_id=rid,
            token_ids=state.codes[start * self.groups : end * self.groups],
            finished=done,
            finish_reason="stop" if done else None,
            payload=AudioChunk(self.plane.put(wave), self.rate),
        )

    def _extend(self, rid: str, state: _Utterance, prompt: Any) -> None:
        if prompt is None:
            return
        if hasattr(prompt, "tolist"):
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in prompt
        ):
            raise RequestError(
                f"qwen3-tts decoder: request {rid!r}: the prompt must be codec ids (ints), "
                f"got {type(prompt).__name__}"
            )
        for i, code in enumerate(prompt):
            if not 0 <= code < self.codebook:
                raise RequestError(
                    f"qwen3-tts decoder: request {rid!r}: codec id {code} at position "
                    f"{len(state.codes) + i} is outside [0, {self.codebook})"
                )
        state.codes.extend(prompt)


def build(config: dict[str, Any]) -> DecoderEngine:
    return DecoderEngine(config)
