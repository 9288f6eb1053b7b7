"""Streamed vs whole-utterance token2wav: the measured error of chunked decoding.

``python -m omni_qwen.fidelity [CHECKPOINT_DIR] [--coupled STD] [--first]`` prints a markdown
table: for the same codes, voice and seed, the streamed waveform and mel against the whole
utterance's (relative L2 error, max abs diff), per context setting and utterance length; with
``--first``, per ``first_steps`` (the first chunk's DiT ODE) at the ``qwen2.5-omni`` pipeline's
first-chunk shape (``omni_qwen.pipelines.STREAM_OPTIONS``), with the first piece's own error.
``--coupled`` first re-draws the DiT's attention and modulation weights with that std: the tiny
checkpoint's random DiT (init std 0.02) barely carries information across blocks, so its error is
near float rounding whatever the context; a coupled DiT shows how the error falls as the context
grows.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_qwen.stream_wav import ChunkSynth, StreamDecoder, StreamOptions

LENGTHS = (60, 120, 240)
SETTINGS = ((0, 0), (12, 12), (12, 24), (24, 24), (48, 48))  # (left, right) codec frames
FIRST_STEPS = (2, 3, 4, 6, 8, None)  # first_steps (None: the DiT's num_steps, 10)


@dataclass
class Fidelity:
    left: int
    right: int
    codes: int
    wave_rel: float  # ||streamed - whole|| / ||whole||
    wave_max: float  # max |streamed - whole|
    mel_rel: float


def codes_of(length: int, salt: int = 0) -> list[int]:
    return [(i * 617 + 11 + salt * 131) % 8292 for i in range(length)]


def couple(model: Any, std: float, seed: int = 0) -> None:
    """Re-draw the DiT's attention projections and its per-layer modulation with ``std`` (in
    place): attention that moves information across blocks, unlike the random init's."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.code2wav_dit_model.transformer_blocks:
            for lin in (layer.attn.to_q, layer.attn.to_k, layer.attn.to_v, layer.attn.to_out[0]):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * std)
            lin = layer.attn_norm.linear
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * std)


def whole(model: Any, codes: list[int], speaker: dict[str, Any], seed: int, opts: Any) -> Any:
    """(waveform, mel) of the whole utterance, as the engine's whole mode decodes it."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.default_generator.manual_seed(seed)
        mel = model.code2wav_dit_model.sample(
            speaker["cond"],
            speaker["ref_mel"],
            torch.tensor([codes]),
            num_steps=opts.num_steps,
            guidance_scale=opts.guidance_scale,
            sway_coefficient=opts.sway_coefficient,
        )
        wave = model.code2wav_bigvgan_model(mel)
    return wave.reshape(-1).numpy(), mel


def streamed(
    synth: ChunkSynth, codes: list[int], speaker: dict[str, Any], seed: int, arrive: int = 1
) -> tuple[Any, Any, list[int]]:
    """(waveform, the mel it voiced, samples per chunk): the codes arriving ``arrive`` at a time,
    a chunk decoded whenever one is ready."""
    import numpy as np
    import torch

    mels: list[Any] = []
    voice = synth.wave

    def recording(mel: Any, start: int, end: int) -> Any:
        mels.append(mel[..., start:end])
        return voice(mel, start, end)

    synth.wave = recording  # type: ignore[method-assign]
    try:
        decoder = StreamDecoder(synth, seed, speaker)
        have: list[int] = []
        pieces: list[Any] = []
        for i in range(0, len(codes), arrive):
            have.extend(codes[i : i + arrive])
            final = len(have) == len(codes)
            while decoder.ready(have, final):
                wave, done = decoder.step(have, final)
                pieces.append(wave)
                if done:
                    break
    finally:
        del synth.wave
    return np.concatenate(pieces), torch.cat(mels, dim=-1), [len(p) for p in pieces]


def measure(
    model: Any,
    opts: Any,
    speaker: dict[str, Any],
    settings: tuple[tuple[int, int], ...] = SETTINGS,
    lengths: tuple[int, ...] = LENGTHS,
    chunk: int = 24,
    seed: int = 7,
) -> list[Fidelity]:
    import numpy as np

    rows = []
    for length in lengths:
        codes = codes_of(length)
        ref, ref_mel = whole(model, codes, speaker, seed, opts)
        for left, right in settings:
            stream = StreamOptions(
                chunk_frames=chunk, left_context=left, right_context=right, crossfade=min(4, right)
            )
            wave, mel, _ = streamed(ChunkSynth(model, opts, stream), codes, speaker, seed)
            rows.append(
                Fidelity(
                    left,
                    right,
                    length,
                    float(np.linalg.norm(wave - ref) / np.linalg.norm(ref)),
                    float(np.abs(wave - ref).max()),
                    float((mel - ref_mel).norm() / ref_mel.norm()),
                )
            )
    return rows


@dataclass
class FirstChunk:
    """A first-chunk setting's errors: the waveform and its first piece against the whole's."""

    steps: int | None  # options.stream.first_steps (None: num_steps)
    codes: int
    first_samples: int  # waveform samples of the first piece
    wave_rel: float
    first_rel: float  # the first piece's relative L2 against the same samples of the whole
    mel_rel: float


def measure_first(
    model: Any,
    opts: Any,
    speaker: dict[str, Any],
    steps: tuple[int | None, ...] = FIRST_STEPS,
    lengths: tuple[int, ...] = (60,),
    stream: dict[str, Any] | None = None,
    seed: int = 7,
) -> list[FirstChunk]:
    """The streamed decoding's error per ``first_steps`` (the other options: ``stream``, else
    the defaults)."""
    import numpy as np

    rows = []
    for length in lengths:
        codes = codes_of(length)
        ref, ref_mel = whole(model, codes, speaker, seed, opts)
        for n in steps:
            options = StreamOptions(**{**(stream or {}), "first_steps": n})
            wave, mel, sizes = streamed(ChunkSynth(model, opts, options), codes, speaker, seed)
            k = next(s for s in sizes if s)  # the first piece with samples
            rows.append(
                FirstChunk(
                    n,
                    length,
                    k,
                    float(np.linalg.norm(wave - ref) / np.linalg.norm(ref)),
                    float(np.linalg.norm(wave[:k] - ref[:k]) / np.linalg.norm(ref[:k])),
                    float((mel - ref_mel).norm() / ref_mel.norm()),
                )
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    import torch

    from omni_qwen.token2wav import Token2WavOptions, load_speakers, load_token2wav

    parser = argparse.ArgumentParser(prog="python -m omni_qwen.fidelity")
    parser.add_argument("model", nargs="?", default=None, help="checkpoint dir (default: tiny)")
    parser.add_argument("--coupled", type=float, default=None, help="re-draw DiT attention std")
    parser.add_argument("--first", action="store_true", help="the error per first_steps")
    args = parser.parse_args(argv)
    model_dir = args.model
    if model_dir is None:
        from omni_core import OmniSettings
        from omni_core.extend import resolve_model
        from omni_core.plugin import PluginHost

        model_dir = resolve_model("tiny-qwen2.5-omni", PluginHost.create(OmniSettings()))
    torch.set_num_threads(1)
    model, _ = load_token2wav(Path(model_dir))
    if args.coupled is not None:
        couple(model, args.coupled)
    speaker = load_speakers(Path(model_dir))["Chelsie"]
    if args.first:
        from omni_qwen.pipelines import STREAM_OPTIONS

        shape = {k: v for k, v in STREAM_OPTIONS.items() if k != "first_steps"}
        print(f"first chunk: {shape}")
        print(
            "| first_steps | codes | first piece (samples) | first piece rel. L2 "
            "| waveform rel. L2 | mel rel. L2 |"
        )
        print("|---|---|---|---|---|---|")
        for f in measure_first(model, Token2WavOptions(), speaker, lengths=(60, 240), stream=shape):
            steps = f.steps or "10 (unset)"
            print(
                f"| {steps} | {f.codes} | {f.first_samples} | {f.first_rel:.2e} | "
                f"{f.wave_rel:.2e} | {f.mel_rel:.2e} |"
            )
        return
    rows = measure(model, Token2WavOptions(), speaker)
    print("| left / right context | codes | waveform rel. L2 | waveform max abs | mel rel. L2 |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.left} / {r.right} | {r.codes} | {r.wave_rel:.2e} | {r.wave_max:.2e} | "
            f"{r.mel_rel:.2e} |"
        )


if __name__ == "__main__":
    main()
