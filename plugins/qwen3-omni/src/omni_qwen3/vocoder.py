"""Qwen3-Omni's code2wav as a stage engine: the talker's codec frames → a 24 kHz waveform.

``build(config)`` is the factory the core's ``torch`` stage kind calls in the stage process
(``config``: ``{"model": <checkpoint dir>, "threads": n, "options": {...}}``). It loads
``Qwen3OmniMoeCode2Wav`` from the checkpoint's ``code2wav.*`` tensors only (float32, CPU).

**Request.** ``prompt``: codec ids, ``num_quantizers`` per frame, frame after frame (what the
talker stage emits, :mod:`omni_qwen3.talker`); with ``streaming_input`` they arrive in chunks.
An id outside ``[0, codebook_size)`` or a count that is not whole frames at the end is a 400.

**Whole decode** (default): once the codes are final, one ``code2wav(codes)`` call, as
``generate()`` does for up to 300 frames (its ``chunked_decode(chunk_size=300)``: one decode);
equal to transformers' waveform to float precision. **Streamed** (a request with the generic
audio option ``extra[AUDIO_OPTIONS]["stream"]``, which ``omni serve`` sets for a streamed chat
with audio out, or ``extra["audio_stream"]``): every ``options.chunk_frames`` frames are decoded
with ``options.left_context`` frames of context as they arrive, gap-free
(:func:`omni_qwen3.code2wav.decode_piece`); the pieces join into the whole decode's length and
equal it within 1e-6 once the left context covers the receptive field
(:func:`omni_qwen3.code2wav.receptive_field`; docs/models.md has the error table).

**Output.** ``StageOutput``s with an :class:`~omni_core.media.AudioChunk` (float32 mono, 24 kHz):
one at the end (whole), or one per chunk (streamed), ``token_ids`` the frames' codes voiced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_core.family import audio_streamed, load_part, local_checkpoint
from omni_qwen3.code2wav import decode_piece

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000


class Code2WavOptions(BaseModel):
    """``engine_args.options`` of a code2wav stage (streamed requests only)."""

    model_config = ConfigDict(extra="forbid")

    chunk_frames: int = Field(default=12, ge=1, description="frames decoded per streamed chunk")
    left_context: int = Field(
        default=25, ge=1, description="past frames a streamed chunk sees (generate()'s 25)"
    )


@dataclass
class _Utterance:
    stream: bool
    codes: list[int] = field(default_factory=list)
    final: bool = False
    voiced: int = 0  # frames decoded so far (streamed)


class Code2WavEngine(TorchStageEngine):
    kind = "qwen3-omni code2wav"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from transformers import Qwen3OmniMoeCode2Wav, Qwen3OmniMoeConfig

        from omni_core.extend import default_plane

        try:
            self.options = Code2WavOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError([f"code2wav options: {exc}"]) from None
        if not config.get("model"):
            raise ConfigError(["code2wav needs engine_args.model (a Qwen3-Omni checkpoint)"])
        self.torch = torch
        checkpoint = local_checkpoint(str(config["model"]))
        omni = Qwen3OmniMoeConfig.from_pretrained(checkpoint)
        model = Qwen3OmniMoeCode2Wav._from_config(omni.code2wav_config, dtype=torch.float32)
        self.model = load_part(model, checkpoint, "code2wav.")
        self.groups = int(omni.code2wav_config.num_quantizers)
        self.codebook = int(omni.code2wav_config.codebook_size)
        self.plane = default_plane()
        self.requests: dict[str, _Utterance] = {}

    def add(self, request: Any) -> None:
        state = _Utterance(stream=audio_streamed(request.params.extra, stage="code2wav"))
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

    def ready(self, state: _Utterance) -> bool:
        if state.final:
            return True
        frames = len(state.codes) // self.groups
        return state.stream and frames - state.voiced >= self.options.chunk_frames

    def has_work(self) -> bool:
        return any(self.ready(state) for state in self.requests.values())

    def step(self) -> list[StageOutput]:
        """One whole utterance or one streamed chunk: the first ready request, round robin."""
        rid = next((r for r, state in self.requests.items() if self.ready(state)), None)
        if rid is None:
            return []
        state = self.requests.pop(rid)
        try:
            out = self._decode(rid, state)
        except Exception as exc:  # this request's own failure: it ends, the others go on
            logger.warning("request %s failed in code2wav", rid, exc_info=True)
            return [error_output(rid, exc)]
        if not out.finished:
            self.requests[rid] = state
        return [out]

    def _decode(self, rid: str, state: _Utterance) -> StageOutput:
        import numpy as np

        from omni_core.extend import AudioChunk

        torch = self.torch
        frames = len(state.codes) // self.groups
        if state.final and len(state.codes) % self.groups:
            raise RequestError(
                f"code2wav: request {rid!r}: {len(state.codes)} codes are not whole frames of "
                f"{self.groups}"
            )
        start = state.voiced if state.stream else 0
        end = frames if state.final else start + self.options.chunk_frames
        codes = torch.tensor(state.codes[: end * self.groups], dtype=torch.long)
        codes = codes.reshape(1, -1, self.groups).transpose(1, 2)
        if end > start:
            with torch.inference_mode():
                wav = decode_piece(self.model, codes, start, end, self.options.left_context)
            wave = wav.reshape(-1).to(torch.float32).numpy()
        else:
            wave = np.zeros(0, dtype=np.float32)
        state.voiced = end
        done = state.final and end == frames
        return StageOutput(
            request_id=rid,
            token_ids=state.codes[start * self.groups : end * self.groups],
            finished=done,
            finish_reason="stop" if done else None,
            payload=AudioChunk(self.plane.put(wave), SAMPLE_RATE),
        )

    def _extend(self, rid: str, state: _Utterance, prompt: Any) -> None:
        import numpy as np

        if prompt is None:
            return
        if isinstance(prompt, np.ndarray):
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in prompt
        ):
            raise RequestError(
                f"code2wav: request {rid!r}: the prompt must be a sequence of codec ids (ints), "
                f"got {type(prompt).__name__}"
            )
        for i, code in enumerate(prompt):
            if not 0 <= code < self.codebook:
                raise RequestError(
                    f"code2wav: request {rid!r}: codec id {code} at position "
                    f"{len(state.codes) + i} is outside [0, {self.codebook})"
                )
        state.codes.extend(prompt)


def build(config: dict[str, Any]) -> Code2WavEngine:
    return Code2WavEngine(config)
