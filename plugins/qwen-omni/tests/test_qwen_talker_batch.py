"""The talker batches the decode steps of concurrent requests into one forward, and each request's
codes stay transformers' batch-of-one codes.

Three requests of different prompt lengths and rope offsets (text; audio + text; image + text,
whose 3D positions give a rope delta) run in one talker engine, greedy, the third added while the
first two are decoding (so its prefill shares an engine step with their batched decode, and the
caches differ in length): each request's codes equal transformers' talker's (``hf_speech``) and
the engine's with ``max_batch: 1`` (a forward per request), exact ids; so do their logits at
every step, within float rounding batched (the codes of the tiny random talker alone hide a
wrong mask or rope position; the logits do not), bitwise one at a time. The batched engine's
decode forwards carry 2, then 3 requests. Seeded sampling (each request its own generator) draws
the same codes batched as one request at a time.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from qwen_helpers import AUDIO_CHAT, IMAGE_CHAT, TEXT_CHAT, image, sine
from talker_helpers import hf_speech, whole_input

from omni_core.sampling import SamplingParams

LOGIT_TOLERANCE = (
    1e-5  # batched vs batch-of-one logits, max abs (float32 rounding; measured 1.9e-6)
)
TALKER_TOKENS = 24  # the tiny talker never stops by itself: every request runs to max_tokens
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05, max_tokens=TALKER_TOKENS)
CASES = [
    (TEXT_CHAT, {}, []),
    (AUDIO_CHAT, {"audio": [sine()]}, []),
    (IMAGE_CHAT, {"images": [image()]}, [(56, 56)]),
]


@pytest.fixture(scope="module")
def speeches(hf) -> list[Any]:
    return [
        hf_speech(hf, chat, 8, TALKER_TOKENS, do_sample=False, waveform=False, **media)
        for chat, media, _ in CASES
    ]


def engine(tiny_qwen: Any, max_batch: int) -> Any:
    from omni_qwen.talker import build

    talker = build({"model": str(tiny_qwen), "threads": 1, "options": {"max_batch": max_batch}})
    shapes: list[tuple[int, int]] = []  # (requests, positions) of each talker forward
    forward = talker.talker.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        shapes.append(tuple(kwargs["inputs_embeds"].shape[:2]))
        return forward(*args, **kwargs)

    talker.talker.forward = counted
    talker.shapes = shapes
    logits: dict[str, list[Any]] = {}  # each request's logits per step, before its processors
    sample = talker.sample

    def recorded(state: Any, row: Any) -> int:
        logits.setdefault(state.rid, []).append(row[0].float().clone())
        return sample(state, row)

    talker.sample = recorded
    talker.logits = logits
    return talker


def max_diff(got: list[Any], want: list[Any]) -> float:
    import torch

    assert len(got) == len(want)
    return max(float(torch.max(torch.abs(g - w))) for g, w in zip(got, want, strict=True))


def run_three(
    talker: Any, speeches: list[Any], params: SamplingParams = GREEDY
) -> dict[str, list[int]]:
    """Requests 0 and 1 at once, request 2 after four engine steps; every request's codes."""
    codes: dict[str, list[int]] = {}

    def add(i: int) -> None:
        prompt = whole_input(speeches[i], CASES[i][2])
        request = SimpleNamespace(
            request_id=f"r{i}",
            prompt=prompt,
            params=params,
            streaming_input=False,
            stream_outputs=True,
        )
        talker.add(request)
        codes[f"r{i}"] = []

    add(0)
    add(1)
    steps = 0
    while talker.has_work():
        for out in talker.step():
            assert out.error is None, out.error
            codes[out.request_id] += out.token_ids
        steps += 1
        if steps == 4:
            add(2)
    assert not talker.requests
    return codes


def test_batched_decode_codes_equal_one_request_at_a_time(tiny_qwen, speeches):
    expected = {f"r{i}": s.codes for i, s in enumerate(speeches)}
    assert all(len(c) == TALKER_TOKENS for c in expected.values())
    assert len({len(s.prompt_ids) for s in speeches}) == 3  # three prompt lengths

    batched = engine(tiny_qwen, max_batch=64)
    assert run_three(batched, speeches) == expected
    for i, speech in enumerate(speeches):  # the codes alone would hide a mask or position error
        assert max_diff(batched.logits[f"r{i}"], speech.logits) < LOGIT_TOLERANCE
    # steps 2-5: r0 + r1 decode together (r2's prefill alone in step 5); steps 6-24 all three
    decodes = [n for n, positions in batched.shapes if positions == 1]
    assert decodes.count(2) == 4 and decodes.count(3) == TALKER_TOKENS - 5
    assert sum(decodes) == 3 * (TALKER_TOKENS - 1)

    single = engine(tiny_qwen, max_batch=1)
    assert run_three(single, speeches) == expected
    for i, speech in enumerate(speeches):
        assert max_diff(single.logits[f"r{i}"], speech.logits) == 0.0
    assert {n for n, _ in single.shapes} == {1}


def test_batched_seeded_sampling_draws_as_one_request_at_a_time(tiny_qwen, speeches):
    seeded = SamplingParams(temperature=0.9, top_k=40, top_p=0.8, seed=7, max_tokens=12)
    batched = engine(tiny_qwen, max_batch=64)
    got = run_three(batched, speeches, seeded)
    assert 3 in [n for n, positions in batched.shapes if positions == 1]
    assert got == run_three(engine(tiny_qwen, max_batch=1), speeches, seeded)
    assert all(got[f"r{i}"] != s.codes[:12] for i, s in enumerate(speeches))  # drawn, not argmax


def test_speech_bench_compares_the_talker_batched_and_not():
    from omni_qwen.speech_bench import pipeline

    def talker_options(config: Any) -> dict[str, Any]:
        (talker,) = [s for s in config.stages if s.name == "talker"]
        return dict(talker.engine_args.get("options") or {})

    assert talker_options(pipeline(None, max_batch=1)) == {"max_batch": 1}
    assert "max_batch" not in talker_options(pipeline(None))  # the engine's default: batched
    codes_out = pipeline(None, token2wav=False)  # --no-token2wav: the talker's codes are final
    assert [s.name for s in codes_out.stages] == ["thinker", "talker"]
    assert codes_out.stages[1].final_output and codes_out.stages[1].final_output_type == "tokens"


def test_a_sampling_failure_after_the_batched_forward_fails_that_request_alone(tiny_qwen, speeches):
    """The batched forward advanced every cache: a request whose sampling then fails ends with
    an error, the others keep their codes (they used to be stepped again on advanced caches)."""
    talker = engine(tiny_qwen, max_batch=64)
    sample = talker.sample
    calls = {"r1": 0}

    def failing(state: Any, row: Any) -> int:
        if state.rid == "r1":
            calls["r1"] += 1
            if calls["r1"] == 6:  # a decode step of r1's while r0 and r2 share its forward
                raise ValueError("r1's sampling failed")
        return sample(state, row)

    talker.sample = failing
    codes: dict[str, list[int]] = {}
    errors: dict[str, str] = {}
    for i in range(3):
        request = SimpleNamespace(
            request_id=f"r{i}",
            prompt=whole_input(speeches[i], CASES[i][2]),
            params=GREEDY,
            streaming_input=False,
            stream_outputs=True,
        )
        talker.add(request)
        codes[f"r{i}"] = []
    while talker.has_work():
        for out in talker.step():
            if out.error is not None:
                errors[out.request_id] = out.error.message
            else:
                codes[out.request_id] += out.token_ids
    assert list(errors) == ["r1"] and "sampling failed" in errors["r1"]
    assert codes["r0"] == speeches[0].codes and codes["r2"] == speeches[2].codes
