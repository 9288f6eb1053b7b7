"""``omni run --audio/--image/--voice``: the files become the chat's content parts, the voice
reaches every stage as ``params.extra["voice"]``, the WAV is written; bad input is exit 2 with one
line naming the flag and the file, before any stage starts. In-process, on the voice kit's
pipeline (tests/serve/voice_kit.py)."""

from __future__ import annotations

import re
import types
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.cli import main
from tests.cli.helpers import omni
from tests.serve.voice_kit import KIT, LISTEN_RATE, PIPELINE, RATE, TEXT_ONLY, plugin

# the talker cannot start: a command that started stages would fail with a StartupError (exit 1)
NO_START = PIPELINE.replace("engine_args: {num_tokens: 3}}", "engine_args: {start_fails: true}}")


@pytest.fixture
def cli(omni_settings, fake_entry_points, capsys, tmp_path):
    """``cli(pipeline_yaml, *args)`` → (exit code, stdout, stderr lines) of an in-process
    ``omni run`` with the voice kit installed."""
    fake_entry_points.add("voice-kit", plugin())
    KIT.seen.clear()

    def run(pipeline: str, *args: str) -> tuple[int, str, list[str]]:
        path = tmp_path / "pipeline.yaml"
        path.write_text(pipeline)
        code = main(["run", str(path), "-p", "hi", "-o", str(tmp_path / "out"), *args])
        out, err = capsys.readouterr()
        return code, out, err.splitlines()

    return run


def wav_file(path: Path, samples: np.ndarray, rate: int = LISTEN_RATE) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype("<i2").tobytes())
    return path


@pytest.fixture
def media(tmp_path):
    samples = (np.sin(np.arange(1600) / 5) * 12000).astype("<i2")
    pixels = np.arange(4 * 3 * 3, dtype=np.uint8).reshape(4, 3, 3) * 7
    Image.fromarray(pixels).save(tmp_path / "x.png")
    return wav_file(tmp_path / "in.wav", samples), samples, tmp_path / "x.png", pixels


def test_audio_image_and_voice_reach_the_stages_and_the_wav_is_written(cli, media, tmp_path):
    audio, samples, image, pixels = media
    code, out, err = cli(PIPELINE, "--audio", str(audio), "--image", str(image), "--voice", "Ethan")
    assert code == 0, err
    assert out.startswith("[thinker] thinker:")
    [(_, prompt, _)] = [s for s in KIT.seen if s[0] == "thinker"]
    assert prompt["prompt"] == "hi"  # the user message's text after its media parts
    [heard] = prompt["multi_modal_data"]["audio"]
    assert np.array_equal(heard, samples.astype(np.float32) / 32768)
    [seen] = prompt["multi_modal_data"]["image"]
    assert np.array_equal(seen, pixels)
    for stage in ("thinker", "talker", "speaker"):
        assert [e.get("voice") for e in KIT.extras(stage)] == ["Ethan"], stage
    [written] = (tmp_path / "out").glob("*.wav")
    assert f"audio: {written} (" in out and f"at {RATE} Hz)" in out
    with wave.open(str(written)) as wav:
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert frames.size and np.all(frames == int(0.3 * 32767))  # Ethan's level in the kit


def test_without_voice_no_stage_gets_one(cli):
    code, _, err = cli(PIPELINE, "--max-tokens", "2")
    assert code == 0, err
    assert KIT.seen and all("voice" not in extra for _, _, extra in KIT.seen)
    assert all(isinstance(prompt, str) for name, prompt, _ in KIT.seen if name == "thinker")


def test_unknown_voice_is_the_stages_refusal_exit_2(cli):
    code, out, err = cli(PIPELINE, "--voice", "Nobody")
    assert code == 2
    assert err == ["error: stage 'speaker': unknown voice 'Nobody' (voices: ['Chelsie', 'Ethan'])"]
    assert "finish_reason: error" in out


def voice_list(applies: bool = True) -> types.ModuleType:
    """A plugin declaring the speaker stage's voices (``omni_pipeline_voices``), as a family
    whose checkpoint config names its speakers would; ``applies``: whether it takes part."""
    module = types.ModuleType("voice_list_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_applies_to(pipeline: Any) -> bool:
        return applies

    @hookimpl
    def omni_pipeline_voices(pipeline: Any) -> list[str] | None:
        for stage in pipeline.config.stages:
            if stage.kind == "speaker":
                return list(stage.engine_args["voices"])
        return None

    module.omni_applies_to = omni_applies_to
    module.omni_pipeline_voices = omni_pipeline_voices
    return module


def test_a_voice_the_pipeline_does_not_declare_is_refused_before_any_stage_starts(
    cli, fake_entry_points
):
    fake_entry_points.add("voice-list", voice_list())
    code, out, err = cli(NO_START, "--voice", "Ethen")  # the talker cannot start: not started
    assert code == 2
    assert err == [
        "error: --voice Ethen: pipeline 'voice-test' has no voice 'Ethen' (its voices: Chelsie, "
        "Ethan). Did you mean Ethan?"
    ]
    assert KIT.seen == [] and out == ""
    code, _, err = cli(PIPELINE, "--voice", "Ethan")  # a declared voice reaches the stages
    assert code == 0, err
    assert [e.get("voice") for e in KIT.extras("speaker")] == ["Ethan"]


def test_voices_of_a_plugin_not_taking_part_are_not_asked(cli, fake_entry_points):
    fake_entry_points.add("voice-list", voice_list(applies=False))
    code, _, err = cli(NO_START, "--voice", "Nobody")
    assert code == 1  # the check was left to the stages: they started (and failed to)
    assert not any("has no voice" in line for line in err)


def test_bad_files_exit_2_naming_flag_and_file_before_any_stage_starts(cli, media, tmp_path):
    audio, _, image, _ = media
    (tmp_path / "notes.txt").write_text("not audio")
    gone = tmp_path / "gone.wav"
    empty = wav_file(tmp_path / "empty.wav", np.zeros(0, dtype="<i2"))
    cases = [
        (
            ["--audio", str(gone)],
            f"--audio {gone}: cannot read the file (No such file or directory)",
        ),
        (["--image", str(tmp_path)], f"--image {tmp_path}: cannot read the file (Is a directory)"),
        (
            ["--audio", str(tmp_path / "notes.txt")],
            f"--audio {tmp_path / 'notes.txt'}: not a readable WAV file (file does not start "
            "with RIFF id)",
        ),
        (["--audio", str(empty)], f"--audio {empty}: the audio is empty"),
        (
            ["--image", str(audio)],
            f"--image {audio}: not a readable image (cannot identify image file: not one of PNG, "
            "JPEG, WEBP, GIF, BMP, TIFF)",  # not Pillow's '<_io.BytesIO object at 0x...>'
        ),
        (["--raw", "--image", str(image)], f"--image {image}: media need the chat template"),
        (["--voice", ""], "--voice: the voice name is empty"),
    ]
    for args, message in cases:
        code, _, err = cli(NO_START, *args)
        assert code == 2 and len(err) == 1, (args, err)
        assert err[0].startswith(f"error: {message}"), (args, err)
    assert KIT.seen == []


def test_inputs_and_voice_the_pipeline_cannot_take_exit_2(cli, media):
    audio, _, image, _ = media
    text_only = TEXT_ONLY.replace("num_tokens: 3}", "num_tokens: 3, start_fails: true}")
    for flag, path, what in (("--audio", audio, "audio"), ("--image", image, "images")):
        code, _, err = cli(text_only, flag, str(path))
        assert code == 2
        assert err == [
            f"error: {flag} {path}: pipeline 'text-only' cannot take {what}: its first stage "
            "'thinker' takes text only"
        ]
    code, _, err = cli(text_only, "--voice", "Ethan")
    assert code == 2
    assert err == [
        "error: --voice Ethan: pipeline 'text-only' produces no audio (final stages: 'thinker' "
        "(text))"
    ]


def errors(stderr: str) -> list[str]:
    """stderr without the start-up status lines (the tokenizer loads for seconds first)."""
    status = re.compile(r"^omni run tiny-omni: loading the first stage's tokenizer .* \(\d+s\)$")
    return [line for line in stderr.splitlines() if not status.match(line)]


@pytest.mark.engine
def test_tiny_omni_refuses_audio_input_before_starting_vllm(tmp_path):
    audio = wav_file(tmp_path / "in.wav", np.zeros(160, dtype="<i2"))
    result = omni("run", "tiny-omni", "--audio", str(audio), "--voice", "alloy", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert errors(result.stderr) == [
        f"error: --audio {audio}: pipeline 'tiny-omni' cannot take audio: its first stage "
        "'thinker' takes text only"
    ]


@pytest.mark.engine
def test_tiny_omni_prompt_past_max_model_len_is_one_line_before_starting_vllm():
    result = omni("run", "tiny-omni", "--prompt", "word " * 600, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    # one line: the tokenizer's own warning about long sequences is not printed
    assert errors(result.stderr) == [
        "error: the prompt is 1818 tokens; stage 'thinker' takes fewer than its max_model_len "
        "of 512"
    ]
