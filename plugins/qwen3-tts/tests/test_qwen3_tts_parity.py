"""Parity with the official ``qwen-tts`` on the same tiny checkpoints: the plugin's talker + code
predictor engine (batched decode steps, its own sampling) against ``Qwen3TTSModel.generate_*``,
codes of every group exact, greedy and seeded (custom voice, voice design, voice clone in
x-vector and ICL mode); the plugin's decoder against the official decode
within 1e-6, a bound a one-code change breaks; and the checkpoint rebuilt byte-identical."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tts_helpers import drain, request

from omni_core.family import checksums
from omni_core.testing.parity import check_bounded, check_exact, rebuild_in_fresh_process

pytestmark = pytest.mark.timeout(300)  # a fresh rebuild, two references loaded

TEXT = "hello world, a calm voice"
FRAMES = 23  # the official max_new_tokens=24 gives at most 23 frames


class Reference:
    """The official wrapper with the codes its ``generate`` returned captured."""

    def __init__(self, path: Path) -> None:
        from omni_qwen3_tts.shim import load_reference

        self.wrapper = load_reference(str(path))
        self.codes: list[Any] = []
        generate = self.wrapper.model.generate

        def capture(*args: Any, **kwargs: Any) -> Any:
            codes, hidden = generate(*args, **kwargs)
            self.codes = codes
            return codes, hidden

        self.wrapper.model.generate = capture

    def run(self, method: str, seed: int | None, **kwargs: Any) -> tuple[list[int], Any]:
        import torch

        sampling = {} if seed is not None else {"do_sample": False, "subtalker_dosample": False}
        if seed is not None:
            torch.manual_seed(seed)
        wavs, _ = getattr(self.wrapper, method)(max_new_tokens=FRAMES + 1, **sampling, **kwargs)
        return self.codes[0].reshape(-1).tolist(), wavs[0]


@pytest.fixture(scope="module")
def custom(tiny_tts: Path) -> tuple[Reference, Any, Any]:
    from omni_qwen3_tts.decoder import DecoderEngine
    from omni_qwen3_tts.talker import TalkerEngine

    config = {"model": str(tiny_tts), "threads": 1, "options": {"model_type": "custom_voice"}}
    return Reference(tiny_tts / "custom_voice"), TalkerEngine(config), DecoderEngine(config)


@pytest.fixture(scope="module")
def design(tiny_tts: Path) -> tuple[Reference, Any]:
    from omni_qwen3_tts.talker import TalkerEngine

    config = {"model": str(tiny_tts), "threads": 1, "options": {"model_type": "voice_design"}}
    return Reference(tiny_tts / "voice_design"), TalkerEngine(config)


def ours(engine: Any, text: str, seed: int | None = None, **extra: Any) -> list[int]:
    temperature = 0.0 if seed is None else 0.9
    engine.add(request("r", text, temperature=temperature, seed=seed, max_tokens=FRAMES, **extra))
    codes, reason, error = drain(engine)["r"]
    assert error is None and reason in ("stop", "length")
    return codes


def test_a_fresh_rebuild_is_byte_identical(tiny_tts: Path, tmp_path: Path) -> None:
    assert rebuild_in_fresh_process("tiny-qwen3-tts", tmp_path) == checksums(tiny_tts)


@pytest.mark.parametrize("seed", [None, 7], ids=["greedy", "seeded"])
def test_custom_voice_codes_and_waveform_match_qwen_tts(custom: Any, seed: int | None) -> None:
    import torch

    reference, talker, decoder = custom
    theirs, wav = reference.run(
        "generate_custom_voice", seed, text=TEXT, speaker="Ryan", language="English"
    )
    codes = ours(talker, TEXT, seed, voice="ryan", language="english")
    check_exact(codes, theirs, what="codes (16 groups per frame)")
    assert len(codes) == FRAMES * 16  # long enough to mean something (the tiny talker may stop)
    groups = torch.tensor(codes).reshape(1, -1, 16).transpose(1, 2)
    wrong = groups.clone()
    wrong[0, 7, 10] = (wrong[0, 7, 10] + 1) % 64  # one residual code of one frame
    check_bounded(
        decoder.decode(groups).numpy(), wav, 1e-6, off=decoder.decode(wrong).numpy(), what="wav"
    )


def test_custom_voice_with_instructions_and_a_dialect_speaker(custom: Any) -> None:
    reference, talker, _ = custom
    kwargs = {"speaker": "Dylan", "language": "Auto", "instruct": "speak slowly and warmly"}
    theirs, _ = reference.run("generate_custom_voice", 3, text=TEXT, **kwargs)
    codes = ours(talker, TEXT, 3, voice="dylan", instructions=kwargs["instruct"])
    check_exact(codes, theirs, what="codes")


@pytest.mark.parametrize("seed", [None, 11], ids=["greedy", "seeded"])
def test_voice_design_codes_match_qwen_tts(design: Any, seed: int | None) -> None:
    reference, talker = design
    instruct = "a deep calm narrator voice"
    theirs, _ = reference.run(
        "generate_voice_design", seed, text=TEXT, instruct=instruct, language="English"
    )
    check_exact(ours(talker, TEXT, seed, instructions=instruct, language="english"), theirs)


def test_batched_decode_steps_give_each_request_its_own_codes(custom: Any) -> None:
    _, talker, _ = custom
    texts = ["hello world, a calm voice", "read the news today please", "good morning"]
    alone = [ours(talker, t, 5, voice="aiden") for t in texts]
    before = dict(talker.forwards)
    for i, text in enumerate(texts):
        talker.add(
            request(f"b{i}", text, temperature=0.9, seed=5, max_tokens=FRAMES, voice="aiden")
        )
    together = drain(talker)
    for i, codes in enumerate(alone):
        check_exact(together[f"b{i}"][0], codes, what=f"request {i} batched")
    steps = max(len(c) for c in alone) // 16
    # one talker forward per step for all three (their prefills a forward each)
    assert talker.forwards["talker"] - before["talker"] <= steps + len(texts)


def test_a_bad_request_is_a_400_naming_the_field(custom: Any) -> None:
    from omni_core import RequestError

    _, talker, _ = custom
    with pytest.raises(
        RequestError, match="unknown voice 'alloy': this model has aiden, dylan, ryan, vivian"
    ) as info:
        talker.add(request("x", TEXT, voice="alloy"))
    assert info.value.param == "voice"
    with pytest.raises(RequestError, match="empty") as info:
        talker.add(request("y", "  ", voice="ryan"))
    assert info.value.param == "input"
    with pytest.raises(RequestError, match="unknown language") as info:
        talker.add(request("z", TEXT, voice="ryan", language="klingon"))
    assert info.value.param == "language"


@pytest.fixture(scope="module")
def clone(tiny_tts: Path) -> tuple[Reference, Any]:
    from omni_qwen3_tts.talker import TalkerEngine

    config = {"model": str(tiny_tts), "threads": 1, "options": {"model_type": "base"}}
    return Reference(tiny_tts / "base"), TalkerEngine(config)


def reference_speech(rate: int):
    """One second of a tone in noise at ``rate`` (deterministic)."""
    import numpy as np

    t = np.arange(rate) / rate
    noise = np.random.default_rng(0).standard_normal(rate)
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * noise).astype(np.float32)


@pytest.mark.parametrize("seed", [None, 5], ids=["greedy", "seeded"])
def test_voice_clone_x_vector_codes_match_qwen_tts(clone: Any, seed: int | None) -> None:
    """x-vector mode: the ECAPA embedding of 16 kHz speech (resampled to 24 kHz by librosa, as
    the official prompt does) as the speaker row, the text fed one row per step."""
    reference, talker = clone
    speech = reference_speech(16000)
    theirs, _ = reference.run(
        "generate_voice_clone", seed, text=TEXT, language="English",
        ref_audio=(speech, 16000), x_vector_only_mode=True,
    )  # fmt: skip
    ref = {"samples": speech.tolist(), "sample_rate": 16000}
    check_exact(ours(talker, TEXT, seed, language="english", ref_audio=ref), theirs)
    other = {"samples": reference_speech(24000).tolist(), "sample_rate": 24000}
    assert ours(talker, TEXT, seed, language="english", ref_audio=other) != theirs  # it matters


@pytest.mark.parametrize(
    ("seed", "text"),
    [(None, TEXT), (5, TEXT + " read the news today please and more"), (6, "hi")],
    ids=["greedy", "seeded-long", "seeded-short"],
)
def test_voice_clone_icl_codes_match_qwen_tts(clone: Any, seed: int | None, text: str) -> None:
    """ICL mode: the reference's Mimi codes and text in the prompt; a text longer than the
    reference's codec rows trails one row per step, a shorter one is padded."""
    reference, talker = clone
    speech = reference_speech(16000)
    theirs, _ = reference.run(
        "generate_voice_clone", seed, text=text, language="English",
        ref_audio=(speech, 16000), ref_text="good morning", x_vector_only_mode=False,
    )  # fmt: skip
    ref = {"samples": speech.tolist(), "sample_rate": 16000}
    codes = ours(talker, text, seed, language="english", ref_audio=ref, ref_text="good morning")
    check_exact(codes, theirs, what="ICL codes")
