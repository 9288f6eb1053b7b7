"""``omni duplex talk`` on a recording where the voice detector hears no speech (issue 41): it
says so, naming the file and the detector, suggests ``--vad energy`` and exits non-zero (it
wrote an empty 44-byte reply and exited 0 before)."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

pytest.importorskip("omni_duplex")

PIPELINE = """name: duplex-scripted
engine: duplex
duplex: {model: tiny-omni}
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 4}, final_output: true,
     final_output_type: text}
  - {id: 1, name: talker, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}],
     engine_args: {num_tokens: 2}}
  - {id: 2, name: vocoder, kind: scripted, inputs: [{stage: 1, mode: stream, chunk: 2}],
     engine_args: {num_tokens: 1}, final_output: true, final_output_type: audio}
"""


def silent_wav(path: Path, seconds: float = 0.5, rate: int = 16000) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\x00\x00" * int(seconds * rate))
    return path


def test_no_speech_heard_is_said_with_the_fix_and_a_non_zero_exit(
    run_cli, fake_entry_points, tmp_path
):
    import omni_duplex.plugin

    fake_entry_points.add("duplex", omni_duplex.plugin, distribution="omni-duplex")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    wav = silent_wav(tmp_path / "quiet.wav")
    out = tmp_path / "out"
    args = ["duplex", "talk", str(wav), "--fast", "--pipeline", str(tmp_path / "p.yaml")]
    code, stdout, err = run_cli(*args, "--out", str(out))
    assert code == 1, stdout + err
    [line] = err.splitlines()
    assert line.startswith(f"error: no_speech: {wav}: the voice detector (silero) heard no speech")
    assert line.endswith("try --vad energy (any loud sound counts)")
    assert (out / "reply.wav").stat().st_size == 44 and (out / "timeline.jsonl").exists()
    assert stdout == ""
    # with the energy detector already chosen, the advice is not repeated
    code, _, err = run_cli(*args, "--out", str(out), "--vad", "energy")
    assert code == 1 and "(energy) heard no speech" in err and "--vad energy" not in err
