"""tiny-omni and tiny-image end to end on real engines (vLLM, vocoder, diffusion)."""

from __future__ import annotations

import asyncio
import struct
import wave

import pytest

from omni_core import AsyncOmniEngine, OmniSettings
from omni_core.media import AudioChunk, Image, write_png, write_wav
from omni_core.plugin.hooks import PluginHost


@pytest.fixture(scope="module")
def engines():
    settings = OmniSettings()
    host = PluginHost.create(settings, load_entry_points=False)
    omni = AsyncOmniEngine("tiny-omni", settings=settings, plugins=host)
    image = AsyncOmniEngine("tiny-image", settings=settings, plugins=host)
    yield omni, image
    omni.shutdown()
    image.shutdown()


def run(engine, prompt, **kwargs):
    async def go():
        return [o async for o in engine.generate(prompt, **kwargs)]

    return asyncio.run(go())


def test_tiny_omni_streams_text_and_audio(engines, tmp_path):
    omni, _ = engines
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
    omni, _ = engines
    outs = run(omni, "stream me", sampling_params={"thinker": {"max_tokens": 64, "seed": 1}})
    thinker_done = next(
        i for i, o in enumerate(outs) if o.stage_name == "thinker" and o.finish_reason
    )
    first_audio = next(i for i, o in enumerate(outs) if o.stage_name == "vocoder")
    assert first_audio < thinker_done


def test_tiny_image_writes_a_png(engines, tmp_path):
    _, image = engines
    outs = run(image, "a red square")
    finals = [o for o in outs if o.finished]
    assert len(finals) == 1 and isinstance(finals[0].payload, Image)
    assert len(outs) == 2  # a step preview, then the image
    path = write_png(finals[0].payload, tmp_path / "x.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack("!II", data[16:24])
    assert (width, height) == (64, 64)
    other = run(image, "a blue circle")[-1].payload.pixels
    assert (other != finals[0].payload.pixels).any()


def test_diffusion_abort_is_whole_sample_retry(engines):
    _, image = engines

    async def go():
        slow = {"dit": {"extra": {"diffusion": {"steps": 10_000_000, "preview_every": 0}}}}
        gen = image.generate("slow", request_id="img-abort", sampling_params=slow)
        task = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(1.0)
        assert not task.done()  # still denoising
        result = await image.abort_async("img-abort")
        return result, await task

    result, out = asyncio.run(go())
    assert result.success and len(result.outputs) == 1 and result.outputs[0].whole_sample_retry
    assert out.finished and out.payload is None and out.finish_reason == "abort"
    assert out.whole_sample_retry and image.num_active_requests == 0


def test_cli_run_tiny_image_writes_png(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "omni_core.cli",
            "run",
            "tiny-image",
            "--prompt",
            "a red square",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("image: "))
    path = line.split()[1]
    assert path.endswith(".png") and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
