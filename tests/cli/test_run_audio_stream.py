"""``omni run`` on a pipeline with audio out (issue 27): the speaking stage is asked for streamed
audio (the generic ``extra[AUDIO_OPTIONS]``), the WAV is written piece by piece as the audio
arrives (a valid file after every piece) and the time to first audio is printed. In-process, on
the voice kit's pipeline (tests/serve/voice_kit.py: 3 pieces of 80 samples at 8 kHz)."""

from __future__ import annotations

import re
import wave

import pytest

from omni_core.cli import main
from omni_core.cli import run as run_module
from omni_core.media import AUDIO_OPTIONS
from tests.serve.voice_kit import KIT, PIPELINE, RATE, SAMPLES_PER_TOKEN, plugin


@pytest.fixture
def cli(omni_settings, fake_entry_points, capsys, tmp_path):
    fake_entry_points.add("voice-kit", plugin())
    KIT.seen.clear()

    def run(*args: str) -> tuple[int, str]:
        path = tmp_path / "pipeline.yaml"
        path.write_text(PIPELINE)
        code = main(["run", str(path), "-p", "hi", "-o", str(tmp_path / "out"), *args])
        out, err = capsys.readouterr()
        return code, out + err

    return run


def test_wav_grows_as_audio_arrives_and_time_to_first_audio_is_printed(cli, monkeypatch):
    on_disk: list[int] = []  # the file's frames as a player sees them after each piece
    write = run_module.WavSink.write

    def spy(self, request_id, chunk):
        write(self, request_id, chunk)
        with wave.open(str(self.wav.path)) as wav:
            on_disk.append(wav.getnframes())

    monkeypatch.setattr(run_module.WavSink, "write", spy)
    code, out = cli()
    assert code == 0, out
    assert on_disk == [SAMPLES_PER_TOKEN, 2 * SAMPLES_PER_TOKEN, 3 * SAMPLES_PER_TOKEN]
    assert re.search(r"^time to first audio: \d+\.\d\ds$", out, re.M), out
    assert f"at {RATE} Hz)" in out
    for stage in ("thinker", "talker", "speaker"):
        assert [e.get(AUDIO_OPTIONS) for e in KIT.extras(stage)] == [{"stream": True}], stage


def test_extra_asks_for_whole_audio(cli):
    code, out = cli("--extra", "audio.stream=false")
    assert code == 0, out
    assert [e.get(AUDIO_OPTIONS) for e in KIT.extras("speaker")] == [{"stream": False}]
