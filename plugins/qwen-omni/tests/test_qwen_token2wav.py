"""The token2wav stage engine (``omni_qwen.token2wav``) against transformers' token2wav.

Parity: max |Δ| ≤ 1e-3 · max |reference| over the waveform (observed: bitwise equal; same weights,
ops and noise). Relative to the peak: the tiny checkpoint's waveform peaks at ~0.44 (v2 scales its
random BigVGAN's last layer to be audible; v1's peaked at ~4e-7, where an absolute 1e-3 would hold
for any two waveforms), and the bound must not depend on that scale. "Different" means
max |Δ| > 10 · 1e-3 · peak, ten times the parity tolerance (the tiny vocoder mutes its input:
another voice moves the waveform by ~2 % of its peak and the mel by 10 %; another seed by ~40 %).
The engine is driven in-process through its WorkerEngine protocol, and in a real process replica
as a ``kind: torch`` stage of a pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omni_qwen.token2wav import SAMPLE_RATE, Token2WavEngine, Token2WavLoadError, build

from omni_core.errors import ConfigError, RequestError
from omni_core.media import AudioChunk
from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest
from omni_core.stage.worker import RequestScoped

TOL = 1e-3


def close(ours: np.ndarray, ref: np.ndarray) -> bool:
    return ours.shape == ref.shape and float(np.abs(ours - ref).max()) <= TOL * float(
        np.abs(ref).max()
    )


def differs(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.abs(a - b).max()) > 10 * TOL * float(np.abs(b).max())


# 40 codes over the whole codec table, the largest id (num_embeds 8448) included; no stop codes
CODES = [(i * 617 + 11) % 8292 for i in range(39)] + [8448]
SAMPLES_PER_CODE = 480  # 2 mel frames of 240 samples


@pytest.fixture(scope="module")
def engine(tiny_qwen: Path) -> Iterator[Token2WavEngine]:
    import torch

    threads = torch.get_num_threads()  # the engine sets its own: give the session's back after
    yield build({"model": str(tiny_qwen), "threads": 1, "options": {}})
    torch.set_num_threads(threads)


def request(rid: str, prompt: Any, seed: int | None = 7, streaming: bool = False, **extra: Any):
    return StageRequest(
        request_id=rid,
        prompt=prompt,
        params=SamplingParams(seed=seed, extra=extra),
        streaming_input=streaming,
    )


def drain(engine: Any) -> list[Any]:
    outs = []
    while engine.has_work():
        outs.extend(engine.step())
    return outs


def wave(engine: Token2WavEngine, out: Any) -> np.ndarray:
    assert isinstance(out.payload, AudioChunk) and out.payload.sample_rate == SAMPLE_RATE
    return engine.plane.take(out.payload.samples)


def voice(engine: Token2WavEngine, codes: Any, seed: int | None = 7, **extra: Any) -> np.ndarray:
    engine.add(request("r", codes, seed, **extra))
    (out,) = drain(engine)
    assert out.finished and out.finish_reason == "stop" and out.error is None
    return wave(engine, out)


def reference(hf: Any, codes: list[int], seed: int, speaker: str, **kwargs: Any) -> np.ndarray:
    """transformers' token2wav called as ``generate()`` calls it, after ``torch.manual_seed``."""
    import torch

    model = hf[1]
    spk = model.speaker_map[speaker]
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.token2wav(
            torch.tensor([codes]),
            conditioning=spk["cond"].float(),
            reference_mel=spk["ref_mel"].float(),
            **kwargs,
        )
    return out.reshape(-1).float().numpy()


def test_waveform_equals_transformers_token2wav(engine, hf):
    import torch

    rng = torch.get_rng_state()
    ours = voice(engine, CODES, seed=7)
    assert torch.equal(torch.get_rng_state(), rng)  # the process's own RNG is left as it was
    ref = reference(hf, CODES, 7, "Chelsie")
    assert ours.dtype == np.float32 and ours.shape == (len(CODES) * SAMPLES_PER_CODE,)
    assert np.isfinite(ours).all() and 0.05 <= np.abs(ours).max() <= 0.9  # audible, unclipped
    assert close(ours, ref)
    assert close(voice(engine, CODES, seed=7, voice="Ethan"), reference(hf, CODES, 7, "Ethan"))


def test_seed_and_voice_change_the_waveform(engine):
    base = voice(engine, CODES, seed=7)
    assert np.array_equal(voice(engine, CODES, seed=7), base)  # deterministic
    assert differs(voice(engine, CODES, seed=8), base)
    assert differs(voice(engine, CODES, seed=7, voice="Ethan"), base)
    unseeded = [voice(engine, CODES, seed=None) for _ in range(2)]
    assert differs(unseeded[0], unseeded[1])  # a fresh seed each time


def test_options_reach_the_sampler(tiny_qwen, hf, engine):
    import math

    options = {"num_steps": 4, "guidance_scale": 3.0, "sway_coefficient": 0.5}
    fast = build({"model": str(tiny_qwen), "threads": 1, "options": options})
    times: list[float] = []
    hook = fast.model.code2wav_dit_model.register_forward_pre_hook(
        lambda _m, _a, kw: times.append(float(kw["time_step"])), with_kwargs=True
    )
    try:
        ours = voice(fast, CODES[:12], seed=3)
    finally:
        hook.remove()
    assert close(ours, reference(hf, CODES[:12], 3, "Chelsie", **options))
    assert differs(ours, voice(engine, CODES[:12], seed=3))
    # 3 RK4 intervals of 4 DiT evaluations each, starting on the swayed time grid
    grid = [k / 3 + 0.5 * (math.cos(math.pi / 2 * k / 3) - 1 + k / 3) for k in range(3)]
    assert len(times) == 12 and times[0::4] == pytest.approx(grid, abs=1e-6)


def test_bad_options_are_a_config_error(tiny_qwen):
    with pytest.raises(ConfigError, match=r"engine_args\.options\.num_steps"):
        build({"model": str(tiny_qwen), "threads": 1, "options": {"num_steps": 1}})
    with pytest.raises(ConfigError, match=r"engine_args\.options\.steps"):
        build({"model": str(tiny_qwen), "threads": 1, "options": {"steps": 4}})
    with pytest.raises(ConfigError, match=r"options\.voice: unknown voice 'Nobody'; available"):
        build({"model": str(tiny_qwen), "threads": 1, "options": {"voice": "Nobody"}})


def test_a_missing_checkpoint_is_a_load_error(tmp_path):
    with pytest.raises(Token2WavLoadError, match=r"set engine_args\.model"):
        build({"model": None, "threads": 1, "options": {}})
    with pytest.raises(Token2WavLoadError, match=r"'Qwen/Qwen2\.5-Omni-3B' is not a local"):
        build({"model": "Qwen/Qwen2.5-Omni-3B", "threads": 1, "options": {}})
    (tmp_path / "config.json").write_text('{"thinker_config": {}}')
    with pytest.raises(Token2WavLoadError, match="has no token2wav_config"):
        build({"model": str(tmp_path), "threads": 1, "options": {}})


def test_unknown_voice_is_refused_in_add(engine):
    with pytest.raises(ValueError, match=r"'Nobody'.*available: Chelsie, Ethan"):
        engine.add(request("v", CODES, voice="Nobody"))
    assert not engine.has_work() and "v" not in engine.requests


def test_the_default_voice_is_an_option(tiny_qwen, engine):
    ethan = build({"model": str(tiny_qwen), "threads": 1, "options": {"voice": "Ethan"}})
    assert np.array_equal(voice(ethan, CODES[:8]), voice(engine, CODES[:8], voice="Ethan"))
    assert np.array_equal(voice(ethan, CODES[:8], voice="Chelsie"), voice(engine, CODES[:8]))


def test_bad_codes_are_refused(engine):
    with pytest.raises(RequestError, match=r"codec id 8449 at position 1 .*\[0, 8448\]"):
        engine.add(request("b", [5, 8449]))
    with pytest.raises(RequestError, match="codec ids"):
        engine.add(request("b", "hello"))
    with pytest.raises(RequestError, match=r"16385 codes, more than the DiT's 16384"):
        engine.add(request("b", [1] * 16385))
    with pytest.raises(RequestError, match=r"16385 codes"):  # a stop code after them: still
        engine.add(request("b", [1] * 16385 + [8294]))
    assert not engine.has_work() and not engine.requests


def test_streamed_codes_equal_the_whole_utterance_and_stop_at_a_stop_code(engine):
    whole = voice(engine, CODES)
    engine.add(request("s", np.array(CODES[:10]), streaming=True))
    engine.add_input("s", CODES[10:25], final=False)
    assert not engine.has_work() and engine.step() == []  # nothing before the input is final
    engine.add_input("s", [*CODES[25:], 8294, 1, 2, 3], final=False)  # end code: the rest is cut
    engine.add_input("s", [4, 5], final=False)
    engine.add_input("s", [], final=True)
    (out,) = drain(engine)
    assert out.token_ids == CODES
    assert np.array_equal(wave(engine, out), whole)


def test_no_codes_is_an_empty_utterance(engine):
    engine.add(request("e", [8292, 17]))  # the talker's pad code first: nothing to voice
    (out,) = drain(engine)
    assert out.finished and out.finish_reason == "stop" and out.token_ids == []
    assert wave(engine, out).shape == (0,)


def test_a_failure_while_synthesizing_fails_that_request_only(engine, monkeypatch):
    synthesize = engine.synthesize

    def failing(codes, speaker, seed):
        if seed == 13:
            raise RuntimeError("boom")
        return synthesize(codes, speaker, seed)

    monkeypatch.setattr(engine, "synthesize", failing)
    engine.add(request("bad", CODES[:4], seed=13))
    engine.add(request("good", CODES[:4], seed=14))
    engine.add(request("gone", CODES[:4], seed=15))
    engine.abort(["gone"])
    outs = {o.request_id: o for o in drain(engine)}
    assert set(outs) == {"bad", "good"}
    assert outs["bad"].finish_reason == "error" and outs["bad"].error.status_code == 500
    assert "boom" in outs["bad"].error.message
    assert wave(engine, outs["good"]).shape == (4 * SAMPLES_PER_CODE,)


def test_request_scoped_worker_answers_400_for_an_unknown_voice(engine):
    worker = RequestScoped(engine)  # what the stage worker wraps the factory's engine in
    worker.add(request("x", CODES[:4], voice="Nobody"))
    worker.add(request("y", CODES[:4]))
    outs = {o.request_id: o for o in drain(worker)}
    assert outs["x"].error.status_code == 400 and "Nobody" in outs["x"].error.message
    assert outs["y"].finish_reason == "stop"
    assert engine.plane.take(outs["y"].payload.samples).shape == (4 * SAMPLES_PER_CODE,)


def test_a_torch_stage_in_a_process_replica(qwen_cache, hf):
    """``kind: torch`` with this engine: its own OS process, the registered model resolved, the
    waveform through the data plane, a bad voice a 400 for that request only."""
    from omni_core import AsyncOmniEngine, OmniSettings, PipelineConfig
    from omni_core.plugin.hooks import PluginHost

    stage = {
        "id": 0,
        "name": "token2wav",
        "kind": "torch",
        "engine_args": {
            "engine": "omni_qwen.token2wav:build",
            "model": "tiny-qwen2.5-omni",
            "threads": 1,
            "output": "whole",
        },
        "final_output": True,
    }
    config = PipelineConfig.from_dict({"name": "token2wav", "stages": [stage]})
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0, disable_plugins=["cfg"])
    engine = AsyncOmniEngine(config, settings=settings, plugins=PluginHost.create(settings))

    async def go(voice: str) -> list[Any]:
        params = {"token2wav": {"seed": 5, "extra": {"voice": voice}}}
        return [out async for out in engine.generate(CODES, sampling_params=params)]

    async def both() -> tuple[list[Any], list[Any]]:
        return await asyncio.gather(go("Ethan"), go("Nobody"))

    try:
        good, bad = asyncio.run(both())
    finally:
        engine.shutdown()
    assert bad[-1].finish_reason == "error" and bad[-1].error.status_code == 400
    assert "Nobody" in bad[-1].error.message
    out = good[-1]
    assert out.finished and out.error is None and out.token_ids == CODES
    audio = out.payload
    assert isinstance(audio, AudioChunk) and audio.sample_rate == SAMPLE_RATE
    assert close(audio.samples, reference(hf, CODES, 5, "Ethan"))
