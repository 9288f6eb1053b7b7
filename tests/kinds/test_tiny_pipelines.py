"""tiny-omni end to end on real engines (vLLM, vocoder). The image path is omni-qwen-image's
(plugins/qwen-image/tests: parity with diffusers, the abort as a whole-sample retry, the CLI)."""

from __future__ import annotations

import asyncio
import struct
import wave

import pytest

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.media import AudioChunk, write_wav
from omni_core.plugin.hooks import PluginHost


@pytest.fixture(scope="module")
def engines():
    settings = OmniSettings()
    host = PluginHost.create(settings, load_entry_points=False)
    omni = AsyncOmniEngine("tiny-omni", settings=settings, plugins=host)
    yield omni
    omni.shutdown()


def run(engine, prompt, **kwargs):
    async def go():
        return [o async for o in engine.generate(prompt, **kwargs)]

    return asyncio.run(go())


def test_tiny_omni_streams_text_and_audio(engines, tmp_path):
    omni = engines
    first = run(omni, "Hello omni world")
    second = run(omni, "A different prompt entirely")
    for outs in (first, second):
        assert sum(o.finished for o in outs) == 1 and outs[-1].finished
        text = "".join(o.text for o in outs if o.stage_name == "thinker")
        assert text and len([o for o in outs if o.stage_name == "thinker"]) == 24
        audio = [o for o in outs if o.stage_name == "vocoder"]
        assert len(audio) > 1  # chunk by chunk
        # every output carries an audio chunk, except possibly an empty finishing one (the
        # talker's input closed after the vocoder had voiced its last chunk)
        silent = [o for o in audio if not isinstance(o.payload, AudioChunk)]
        assert all(o.finished and not o.token_ids and o.payload is None for o in silent)
        assert len(silent) <= 1
    wavs = []
    for i, outs in enumerate((first, second)):
        audio = [o for o in outs if o.stage_name == "vocoder"]
        codes = sum(len(o.token_ids) for o in audio)
        chunks = [o.payload for o in audio if isinstance(o.payload, AudioChunk)]
        path = write_wav(chunks, tmp_path / f"{i}.wav")
        with wave.open(str(path)) as wav:
            assert wav.getframerate() == 16000 and wav.getnchannels() == 1
            frames = wav.readframes(wav.getnframes())
            assert wav.getnframes() == codes * 320  # length follows the talker's tokens
        samples = struct.unpack(f"<{len(frames) // 2}h", frames)
        assert max(abs(s) for s in samples) > 1000  # not silent
        wavs.append(frames)
    assert wavs[0] != wavs[1]  # different prompts, different audio


def test_tiny_omni_talker_starts_before_thinker_finished(engines):
    omni = engines
    outs = run(omni, "stream me", sampling_params={"thinker": {"max_tokens": 64, "seed": 1}})
    thinker_done = next(
        i for i, o in enumerate(outs) if o.stage_name == "thinker" and o.finish_reason
    )
    first_audio = next(i for i, o in enumerate(outs) if o.stage_name == "vocoder")
    assert first_audio < thinker_done
