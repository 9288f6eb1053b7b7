"""Streaming token2wav (``omni_qwen.stream_wav``): chunked decoding against the whole utterance.

Bounds (from the measurement in docs/models.md, ``python -m omni_qwen.fidelity``): BigVGAN chunked
with its receptive-field padding equals the whole vocoder within 1e-5 relative L2 (measured ~3e-7:
float rounding of differently shaped convolutions); without padding the seams are ~1e-2 off. The
streamed waveform at the default context (24 frames left and right) is within 1e-4 relative L2 of
the whole utterance's on a DiT whose attention carries information across blocks (``couple``:
measured ~1e-6, 100x headroom for thread/BLAS rounding), and the error falls as the context grows
(0 → 12 → 24 frames: ~4e-3 → ~1e-3 → ~4e-6 on the mel).

``first_steps`` (the first chunk's DiT window on a shorter ODE: what makes ``qwen2.5-omni``'s first
streamed audio early) is an approximation of its own, bounded on the coupled DiT: the first
piece within 5e-3 relative L2 of the exact path (measured ~1.2e-3 at the pipeline's 4 steps),
the waveform within 2e-3 (~6e-4 for 60 codes: the later chunks are exact as before), the mel
within 1e-2 (~3e-3); on the tiny checkpoint 1e-4 (~7e-6). The error falls as the steps grow
(2 → 4 → the full 10: ~2.2e-3 → ~1.2e-3 → ~7e-7 on the first piece).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omni_qwen.fidelity import codes_of, couple, measure, measure_first, streamed, whole
from omni_qwen.pipelines import STREAM_OPTIONS, omni_pipeline
from omni_qwen.stream_wav import ChunkSynth, StreamOptions
from omni_qwen.token2wav import Token2WavEngine, build

from omni_core.errors import ConfigError, RequestError
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest


def rel(a: Any, b: Any) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


@pytest.fixture(scope="module")
def engine(tiny_qwen: Path) -> Iterator[Token2WavEngine]:
    import torch

    threads = torch.get_num_threads()
    yield build({"model": str(tiny_qwen), "threads": 1, "options": {}})
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def coupled(engine: Token2WavEngine) -> Any:
    model = copy.deepcopy(engine.model)
    couple(model, 0.3)
    return model


def speaker(engine: Token2WavEngine) -> dict[str, Any]:
    return engine.speakers["Chelsie"]


def test_bigvgan_chunked_with_padding_equals_the_whole_vocoder(engine):
    codes = codes_of(60)
    ref, mel = whole(engine.model, codes, speaker(engine), 7, engine.options)
    synth = engine.chunker
    assert synth.pad >= 20  # the tiny BigVGAN's receptive field: ~25 mel frames per side
    cuts = [0, 17, 40, 41, 77, 120]
    pieces = [synth.wave(mel, a, b) for a, b in itertools.pairwise(cuts)]
    assert rel(np.concatenate(pieces), ref) <= 1e-5
    unpadded = copy.copy(synth)
    unpadded.pad = 0
    cut = [unpadded.wave(mel, a, b) for a, b in itertools.pairwise(cuts)]
    assert rel(np.concatenate(cut), ref) > 1e-3  # what the padding is for


def test_full_context_streaming_equals_the_whole_utterance(engine):
    codes = codes_of(50)
    ref, _ = whole(engine.model, codes, speaker(engine), 3, engine.options)
    opts = StreamOptions(chunk_frames=12, left_context=60, right_context=60, crossfade=0)
    wave, _, sizes = streamed(
        ChunkSynth(engine.model, engine.options, opts), codes, speaker(engine), 3
    )
    assert len(sizes) == 5 and wave.shape == ref.shape
    assert rel(wave, ref) <= 1e-5


def test_error_falls_with_context_and_the_default_is_within_bound(engine, coupled):
    rows = measure(
        coupled,
        engine.options,
        speaker(engine),
        settings=((0, 0), (12, 12), (24, 24)),
        lengths=(60,),
    )
    mel = [r.mel_rel for r in rows]
    wave = [r.wave_rel for r in rows]
    assert mel[0] > mel[1] > mel[2] and wave[0] > wave[1] > wave[2]
    assert mel[0] > 1e-3  # no context: a real approximation on this DiT
    default = StreamOptions()
    assert (default.left_context, default.right_context) == (24, 24)
    assert wave[2] <= 1e-4 and mel[2] <= 1e-4
    # and the tiny checkpoint itself at the default setting
    (tiny,) = measure(
        engine.model, engine.options, speaker(engine), settings=((24, 24),), lengths=(60,)
    )
    assert tiny.wave_rel <= 1e-4


def request(rid: str, prompt: Any, streaming: bool = True, **extra: Any) -> StageRequest:
    return StageRequest(
        request_id=rid,
        prompt=prompt,
        params=SamplingParams(seed=5, extra={"audio_stream": True, **extra}),
        streaming_input=streaming,
    )


def test_first_chunk_after_chunk_plus_right_context_codes(engine):
    codes = codes_of(100)
    opts = StreamOptions()
    first = opts.chunk_frames + opts.right_context
    engine.add(request("s", codes[:1]))
    head: list[Any] = []
    for i in range(1, first + opts.chunk_frames):  # up to the second chunk's codes
        assert engine.has_work() == (i >= first and not head), i  # nothing before `first` codes
        if engine.has_work():
            head.extend(engine.step())
        engine.add_input("s", codes[i : i + 1], final=False)
    assert len(head) == 1 and engine.has_work()  # the second chunk is ready
    # the first chunk went out while the talker was still speaking
    (out,) = head
    assert not out.finished and out.token_ids == codes[: opts.chunk_frames]
    samples = engine.plane.take(out.payload.samples)
    assert len(samples) == (2 * opts.chunk_frames - engine.chunker.pad) * 240
    engine.add_input("s", codes[first + opts.chunk_frames :], final=True)
    rest = []
    while engine.has_work():
        rest.extend(engine.step())
    assert rest[-1].finished and rest[-1].finish_reason == "stop"
    assert sum(len(o.token_ids) for o in rest) == len(codes) - opts.chunk_frames
    waves = [engine.plane.take(o.payload.samples) for o in rest]
    total = len(samples) + sum(len(w) for w in waves)
    assert total == len(codes) * 480 and "s" not in engine.requests


def test_audio_stream_must_be_a_bool(engine):
    with pytest.raises(RequestError, match=r"extra\.audio_stream must be true or false"):
        engine.add(request("b", [1, 2], audio_stream="yes"))
    assert "b" not in engine.requests


def test_stream_options_are_checked(tiny_qwen):
    with pytest.raises(ConfigError, match=r"stream\.chunk_frames: 20 is not a multiple .*12"):
        build({"model": str(tiny_qwen), "options": {"stream": {"chunk_frames": 20}}})
    with pytest.raises(
        ConfigError, match=r"options\.stream\.first_steps: .*greater than or equal to 2"
    ):
        build({"model": str(tiny_qwen), "options": {"stream": {"first_steps": 1}}})
    with pytest.raises(ConfigError, match=r"options\.stream.*crossfade \(8\) must not exceed"):
        build(
            {"model": str(tiny_qwen), "options": {"stream": {"right_context": 4, "crossfade": 8}}}
        )


def plain(rid: str, **extra: Any) -> StageRequest:
    params = SamplingParams(seed=5, extra=extra)
    return StageRequest(request_id=rid, prompt=[1, 2], params=params, streaming_input=True)


def test_the_generic_audio_option_streams(engine):
    from omni_core.media import AUDIO_OPTIONS, audio_options

    engine.add(plain("g", **{AUDIO_OPTIONS: audio_options(stream=True)}))
    engine.add(plain("w", **{AUDIO_OPTIONS: audio_options(stream=False)}))
    engine.add(plain("d"))
    try:
        assert engine.requests["g"].decoder is not None  # chunk by chunk
        assert engine.requests["w"].decoder is None and engine.requests["d"].decoder is None
    finally:
        engine.abort(["g", "w", "d"])
    with pytest.raises(RequestError, match=r"extra\.audio\.stream must be true or false, not 1"):
        engine.add(plain("b", audio={"stream": 1}))
    with pytest.raises(RequestError, match=r"extra\.audio must be an object"):
        engine.add(plain("c", audio="stream"))
    assert not engine.requests


def test_a_first_chunk_of_its_own_size(tiny_qwen):
    stream = {"first_chunk_frames": 24, "first_right_context": 12}
    t2w = build({"model": str(tiny_qwen), "threads": 1, "options": {"stream": stream}})
    codes = codes_of(80)
    t2w.add(request("f", codes[:35]))
    assert not t2w.has_work()  # 24 + 12 codes make the first chunk
    t2w.add_input("f", codes[35:36], final=False)
    (first,) = t2w.step()
    assert first.token_ids == codes[:24] and not first.finished
    t2w.add_input("f", codes[36:71], final=False)
    assert not t2w.has_work()  # then 24 + 24 as usual: up to code 72
    t2w.add_input("f", codes[71:72], final=False)
    (second,) = t2w.step()
    assert second.token_ids == codes[24:48]
    assert StreamOptions(**stream).sizes(24) == (24, 24)
    with pytest.raises(ConfigError, match=r"stream\.first_chunk_frames: 18 is not a multiple"):
        build({"model": str(tiny_qwen), "options": {"stream": {"first_chunk_frames": 18}}})
    with pytest.raises(ConfigError, match=r"crossfade \(4\) must not exceed first_right_context"):
        build({"model": str(tiny_qwen), "options": {"stream": {"first_right_context": 2}}})


def test_first_lookahead_voices_the_whole_first_chunk_within_the_bound(engine, coupled):
    codes = codes_of(60)
    opts = StreamOptions(first_chunk_frames=12, first_lookahead=True)
    for model in (coupled, engine.model):
        ref, _ = whole(model, codes, speaker(engine), 7, engine.options)
        wave, _, sizes = streamed(
            ChunkSynth(model, engine.options, opts), codes, speaker(engine), 7
        )
        assert sizes[0] == 12 * 2 * 240  # all 24 mel frames of the first chunk, none held back
        assert wave.shape == ref.shape and rel(wave, ref) <= 1e-4  # measured ~6e-7
    plain = StreamOptions(first_chunk_frames=12)
    _, _, sizes = streamed(
        ChunkSynth(engine.model, engine.options, plain), codes, speaker(engine), 7
    )
    assert sizes[0] == 0  # without it BigVGAN's padding (26 mel frames) holds the 24 back


def test_first_steps_error_falls_with_steps_and_the_pipeline_default_is_within_bound(
    engine, coupled
):
    (t2w,) = [s for s in omni_pipeline().stages if s.name == "token2wav"]
    assert t2w.engine_args["options"]["stream"] == STREAM_OPTIONS  # what is bounded here
    default = STREAM_OPTIONS["first_steps"]
    shape = {k: v for k, v in STREAM_OPTIONS.items() if k != "first_steps"}
    rows = measure_first(coupled, engine.options, speaker(engine), (2, default, None), stream=shape)
    first = [r.first_rel for r in rows]
    assert first[0] > first[1] > first[2]  # fewer ODE steps, a larger error; none at the full 10
    assert first[1] > 1e-4 and first[2] <= 1e-5  # a real approximation, gone on the full ODE
    bounded = rows[1]
    assert bounded.first_rel <= 5e-3 and bounded.wave_rel <= 2e-3 and bounded.mel_rel <= 1e-2
    (tiny,) = measure_first(engine.model, engine.options, speaker(engine), (default,), stream=shape)
    assert tiny.first_rel <= 1e-4 and tiny.wave_rel <= 1e-4


def test_first_steps_changes_the_first_window_only(engine, coupled):
    codes = codes_of(50)
    ref, _ = whole(coupled, codes, speaker(engine), 3, engine.options)
    full = {"chunk_frames": 12, "left_context": 60, "right_context": 60, "crossfade": 0}
    opts = StreamOptions(**full, first_steps=2, first_lookahead=True)
    wave, _, sizes = streamed(ChunkSynth(coupled, engine.options, opts), codes, speaker(engine), 3)
    first = sizes[0]
    assert first > 0 and wave.shape == ref.shape
    assert rel(wave[:first], ref[:first]) > 1e-4  # the first window's 2-point ODE
    # later windows run the full ODE: exact given the mel, except BigVGAN's padding into the
    # first piece's mel (vocoder_pad frames) right after it
    later = first + engine.chunker.pad * 240
    assert rel(wave[later:], ref[later:]) <= 1e-5


def test_the_speech_bench_merges_its_first_chunk_over_the_pipeline_options():
    from omni_qwen.speech_bench import pipeline

    def stream(config: Any) -> dict[str, Any]:
        (t2w,) = [s for s in config.stages if s.name == "token2wav"]
        return dict(t2w.engine_args["options"]["stream"])

    assert stream(pipeline(None)) == STREAM_OPTIONS
    assert stream(pipeline(None, first_steps=10)) == {**STREAM_OPTIONS, "first_steps": 10}
    assert stream(pipeline(None, plain_first=True)) == {}  # StreamOptions' own defaults
    assert stream(pipeline([24, 12], plain_first=True)) == {
        "first_chunk_frames": 24,
        "first_right_context": 12,
    }
