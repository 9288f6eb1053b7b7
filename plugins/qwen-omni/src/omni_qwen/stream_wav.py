"""Streaming token2wav: the talker's codes decoded chunk by chunk as they arrive.

Whole-utterance decoding (:mod:`omni_qwen.token2wav`) is exact but speaks only after the talker's
last code. Here each chunk of ``chunk_frames`` codec frames is decoded as soon as its codes plus
``right_context`` more have arrived:

* **DiT, bounded context.** The DiT's flow ODE runs over the window ``[start - left_context,
  end + right_context)`` of codec frames (clipped to the utterance), with the initial noise of
  exactly those positions of the whole utterance's noise (the same seeded draw, made in
  arrival order: ``torch.randn`` from a generator seeded with the request's seed yields the
  whole utterance's noise piece by piece). Windows start on the DiT's attention blocks
  (``block_size / repeats`` codec frames), so each block sees the same neighbours as in the
  whole utterance, except at the window's edges: that, compounded by the ODE's 36 DiT
  evaluations, is the approximation (``docs/models.md``, the measured error table).
* **Cross-fade.** The first ``crossfade`` frames of a chunk's mel are blended linearly with what
  the previous chunk predicted for them from its right context, so the mel has no seam.
* **BigVGAN, exact.** The vocoder is convolutional with a bounded receptive field
  (``vocoder_pad`` mel frames each side, measured on the loaded vocoder when unset); a piece of
  waveform is rendered from its mel plus that padding on both sides, so given the same mel the
  chunked waveform equals the whole one within float rounding. A chunk's last ``vocoder_pad``
  mel frames are therefore voiced with the next chunk (or at the end). With ``first_lookahead``
  the first chunk is voiced to its end at once, the DiT window's prediction of the next frames
  standing in for that padding (approximate over its last ``vocoder_pad`` frames): with a short
  first chunk (``first_chunk_frames``) this is what makes first audio early.
* **A cheaper first window.** ``first_steps`` runs the first chunk's DiT window on an ODE of its
  own, fewer time points than the DiT's ``num_steps`` (4: 12 DiT calls instead of 36): the first
  audio's compute drops by about the DiT's share, at an error of its own on the first piece (and
  the cross-fade and BigVGAN padding into the next), measured and bounded in ``docs/models.md``;
  every later window runs the full ODE.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_core import ConfigError
from omni_core.family import context_window, crossfade, padded_render
from omni_core.family import receptive_field as family_receptive_field

logger = logging.getLogger(__name__)

HOP = 240  # waveform samples per mel frame (BigVGAN's total upsampling)


class StreamOptions(BaseModel):
    """``engine_args.options.stream`` of a token2wav stage (codec frames unless said)."""

    model_config = ConfigDict(extra="forbid")

    chunk_frames: int = Field(default=24, ge=1, description="codec frames decoded per chunk")
    left_context: int = Field(default=24, ge=0, description="past codec frames a chunk sees")
    right_context: int = Field(default=24, ge=0, description="future codec frames a chunk sees")
    first_chunk_frames: int | None = Field(
        default=None, ge=1, description="codec frames of the first chunk; unset: chunk_frames"
    )
    first_right_context: int | None = Field(
        default=None,
        ge=0,
        description="future codec frames the first chunk sees; unset: right_context",
    )
    first_lookahead: bool = Field(
        default=False,
        description="voice the first chunk to its end, its right-context mel as BigVGAN's padding",
    )
    first_steps: int | None = Field(
        default=None,
        ge=2,
        description="ODE time points of the first chunk's DiT window; unset: options.num_steps",
    )
    crossfade: int = Field(
        default=4, ge=0, description="codec frames blended across a seam (<= right_context)"
    )
    vocoder_pad: int | None = Field(
        default=None,
        ge=0,
        description="mel frames of BigVGAN padding per side; unset: its measured receptive field",
    )

    def sizes(self, start: int) -> tuple[int, int]:
        """(chunk frames, right context) of the chunk starting at codec frame ``start``: the
        first chunk's own, if set, then ``chunk_frames`` and ``right_context``."""
        if start > 0:
            return self.chunk_frames, self.right_context
        right = self.first_right_context
        return (
            self.first_chunk_frames or self.chunk_frames,
            self.right_context if right is None else right,
        )

    @model_validator(mode="after")
    def _fade_within_context(self) -> StreamOptions:
        for name, right in (
            ("right_context", self.right_context),
            ("first_right_context", self.first_right_context),
        ):
            if right is not None and self.crossfade > right:
                raise ValueError(
                    f"crossfade ({self.crossfade}) must not exceed {name} ({right}): the "
                    "blended frames come from the right context"
                )
        return self


def check_alignment(opts: StreamOptions, block_codes: int) -> None:
    """Chunks and left contexts whole DiT blocks, so windows start on block boundaries."""
    errors = [
        f"engine_args.options.stream.{name}: {value} is not a multiple of the DiT's attention "
        f"block ({block_codes} codec frames)"
        for name, value in (
            ("chunk_frames", opts.chunk_frames),
            ("left_context", opts.left_context),
            ("first_chunk_frames", opts.first_chunk_frames or 0),
        )
        if value % block_codes
    ]
    if errors:
        raise ConfigError(errors)


def receptive_field(vocoder: Any, mel_dim: int) -> int:
    """BigVGAN's receptive radius in mel frames (the kit's measurement,
    :func:`omni_core.family.receptive_field`)."""
    return family_receptive_field(vocoder, mel_dim, HOP)


class ChunkSynth:
    """What streamed decoding needs of a loaded ``Qwen2_5OmniToken2WavModel``."""

    def __init__(self, model: Any, options: Any, stream: StreamOptions) -> None:
        import torch

        self.torch = torch
        self.dit = model.code2wav_dit_model
        self.vocoder = model.code2wav_bigvgan_model
        self.options = options  # num_steps, guidance_scale, sway_coefficient
        self.stream = stream
        self.repeats = int(self.dit.repeats)
        self.mel_dim = int(self.dit.mel_dim)
        self.block_codes = max(1, int(self.dit.block_size) // self.repeats)
        check_alignment(stream, self.block_codes)
        pad = stream.vocoder_pad
        self.pad = receptive_field(self.vocoder, self.mel_dim) if pad is None else pad
        logger.info(
            "streaming token2wav: chunk %d, context -%d/+%d, crossfade %d codec frames; "
            "BigVGAN padding %d mel frames",
            stream.chunk_frames,
            stream.left_context,
            stream.right_context,
            stream.crossfade,
            self.pad,
        )

    def mel(
        self, codes: list[int], noise: Any, speaker: dict[str, Any], steps: int | None = None
    ) -> Any:
        """The DiT's mel ``[1, mel_dim, frames]`` for ``codes`` from the given initial noise
        (``Qwen2_5OmniToken2WavDiTModel.sample`` with the noise passed in), its ODE over
        ``steps`` time points (default ``options.num_steps``)."""
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import RungeKutta4ODESolver

        torch, dit, opts = self.torch, self.dit, self.options
        code = torch.tensor([codes], dtype=torch.long)
        ref_mel = speaker["ref_mel"]
        cond = speaker["cond"].unsqueeze(1).repeat(1, noise.shape[1], 1)
        guidance = opts.guidance_scale

        def ode(time_step: Any, hidden: Any) -> Any:
            if guidance < 1e-5:
                return dit(
                    hidden_states=hidden,
                    speaker_embedding=cond,
                    condition_vector=ref_mel,
                    quantized_code=code,
                    time_step=time_step,
                    drop_audio_conditioning=False,
                    drop_code=False,
                    apply_cfg=False,
                )
            out = dit(
                hidden_states=hidden,
                quantized_code=code,
                speaker_embedding=cond,
                condition_vector=ref_mel,
                time_step=time_step,
                apply_cfg=True,
            )
            guided, null = torch.chunk(out, 2, dim=0)
            return guided + (guided - null) * guidance

        grid = torch.linspace(0, 1, steps or opts.num_steps, dtype=cond.dtype)
        if opts.sway_coefficient is not None:
            grid += opts.sway_coefficient * (torch.cos(torch.pi / 2 * grid) - 1 + grid)
        with torch.inference_mode():
            solution = RungeKutta4ODESolver(function=ode, initial_value=noise).integrate(grid)
        return solution[-1].permute(0, 2, 1)

    def wave(self, mel: Any, start: int, end: int) -> Any:
        """The waveform of mel frames ``[start, end)`` of ``mel`` ([1, mel_dim, F], the frames
        known so far), rendered with up to ``pad`` frames on each side (float32 numpy)."""
        out = padded_render(self.vocoder, mel, start, end, self.pad, HOP)
        return out.to(self.torch.float32).numpy()


@dataclass
class StreamState:
    """One request's streamed decoding: codes so far, their noise, the stitched mel."""

    generator: Any
    noise: list[Any] = field(default_factory=list)  # [1, frames, mel_dim] pieces, in order
    noise_frames: int = 0
    next_code: int = 0  # the next chunk's first codec frame
    mel: Any = None  # stitched mel [1, mel_dim, frames] from mel frame `mel_start`
    mel_start: int = 0
    tail: Any = None  # the previous chunk's right-context mel for the cross-fade
    voiced: int = 0  # mel frames whose waveform was emitted
    chunks: int = 0


class StreamDecoder:
    """Chunked decoding of one utterance (its codes are the owner's list, growing)."""

    def __init__(self, synth: ChunkSynth, seed: int, speaker: dict[str, Any]) -> None:
        import torch

        self.synth = synth
        self.speaker = speaker
        self.state = StreamState(generator=torch.Generator().manual_seed(seed))

    def ready(self, codes: list[int], final: bool) -> bool:
        """A chunk can be decoded: its codes and right context arrived, or the input is final
        (the utterance is not done while its owner holds it)."""
        if final:
            return True
        chunk, right = self.synth.stream.sizes(self.state.next_code)
        return len(codes) >= self.state.next_code + chunk + right

    def step(self, codes: list[int], final: bool) -> tuple[Any, bool]:
        """Decode the next chunk: (its new waveform samples, whether the utterance is done)."""
        import numpy as np

        torch, synth, st, opts = self.synth.torch, self.synth, self.state, self.synth.stream
        st.chunks += 1
        n, rep = len(codes), synth.repeats
        if n == 0:
            return np.zeros(0, dtype=np.float32), True
        self._grow_noise(n * rep)
        start = st.next_code
        if start >= n:  # every frame decoded already: voice what the padding held back
            wave = synth.wave(st.mel, st.voiced - st.mel_start, n * rep - st.mel_start)
            st.voiced = n * rep
            return wave, True
        chunk, right = opts.sizes(start)
        lo, end, hi = context_window(start, chunk, opts.left_context, right, n)
        noise = torch.cat(st.noise, dim=1)[:, lo * rep : hi * rep]
        steps = opts.first_steps if start == 0 else None  # the first window's own ODE, if set
        window = synth.mel(codes[lo:hi], noise, self.speaker, steps)
        core = window[..., (start - lo) * rep : (end - lo) * rep].clone()
        if st.tail is not None:  # blend the seam with the previous chunk's prediction
            crossfade(st.tail, core)
        fade = min(opts.crossfade, hi - end) * rep
        st.tail = window[..., (end - lo) * rep : (end - lo) * rep + fade] if fade else None
        st.mel = core if st.mel is None else torch.cat([st.mel, core], dim=-1)
        st.next_code = end
        done = final and end >= n
        known = end * rep  # mel frames final so far
        mel, upto = st.mel, known if done else max(st.voiced, known - synth.pad)
        if opts.first_lookahead and st.chunks == 1 and not done:
            # the window's prediction of the next frames pads BigVGAN: the whole first chunk now
            mel = torch.cat([st.mel, window[..., (end - lo) * rep : (hi - lo) * rep]], dim=-1)
            upto = known
        wave = synth.wave(mel, st.voiced - st.mel_start, upto - st.mel_start)
        st.voiced = upto
        keep = max(0, st.voiced - synth.pad - st.mel_start)  # what the next piece still reads
        if keep:
            st.mel, st.mel_start = st.mel[..., keep:], st.mel_start + keep
        return wave, done

    def _grow_noise(self, frames: int) -> None:
        st = self.state
        if frames > st.noise_frames:
            piece = self.synth.torch.randn(
                [1, frames - st.noise_frames, self.synth.mel_dim], generator=st.generator
            )
            st.noise.append(piece)
            st.noise_frames = frames
