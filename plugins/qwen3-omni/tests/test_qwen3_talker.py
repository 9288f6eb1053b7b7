"""The talker engine (``omni_qwen3.talker``) in this process, fed transformers' own thinker rows,
against ``generate(return_audio=True)``'s talker codes (every code group): seeded sampling (the
same draws as ``torch.manual_seed`` before ``generate``), a reply fed in pieces as a stream edge
feeds it, a reply that goes on past the thinker's eos (transformers' per-row rewrite), and
concurrent requests batched (each one's codes, fewer forwards). The pipeline test
(``test_qwen3_pipeline.py``) covers greedy codes from vLLM's rows."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from qwen3_helpers import AUDIO_IMAGE_CHAT, IM_END, image, speech
from qwen_prompts import AUDIO_CHAT, TEXT_CHAT, sine

from omni_core.sampling import SamplingParams

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

THINKER_TOKENS, FRAMES, SEED = 8, 6, 0
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05, max_tokens=FRAMES)
SAMPLED = SamplingParams(
    temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05, max_tokens=FRAMES, seed=SEED
)


@pytest.fixture(scope="module")
def talker(tiny_qwen3):
    from omni_qwen3.talker import build

    return build({"model": str(tiny_qwen3), "threads": 1, "options": {}})


def reference(hf, chat, sample: bool, eos_at: int | None = None, **media: Any) -> dict[str, Any]:
    return speech(
        hf, chat, THINKER_TOKENS, FRAMES, sample=sample, eos_at=eos_at, seed=SEED, **media
    )


def chunks(ref: dict[str, Any], pieces: int) -> list[dict[str, Any]]:
    """The bridge's dicts: the prompt's rows first, then the reply in ``pieces`` parts."""
    p = len(ref["prompt_ids"])
    first = {"prompt_ids": ref["prompt_ids"], "image_sizes": [], "start": 0, "token_ids": []}
    first.update(embeddings=ref["emb"][:p], hidden=ref["hid"][:p])
    out, rows, tokens = [first], len(ref["emb"]), ref["reply"]
    bounds = [round(i * len(tokens) / pieces) for i in range(pieces + 1)]
    for lo, hi in itertools.pairwise(bounds):
        r0, r1 = p + lo, min(p + hi, rows)
        out.append(
            {"start": r0, "token_ids": tokens[lo:hi], "embeddings": ref["emb"][r0:r1]}
            | {"hidden": ref["hid"][r0:r1]}
        )
    return out


def whole(ref: dict[str, Any]) -> list[dict[str, Any]]:
    """The bridge's one dict on an ``on_finish`` edge: every row and token at once."""
    return [
        {"prompt_ids": ref["prompt_ids"], "image_sizes": [], "start": 0}
        | {"token_ids": ref["reply"], "embeddings": ref["emb"], "hidden": ref["hid"]}
    ]


def drive(engine: Any, parts: list[dict[str, Any]], params: SamplingParams) -> list[int]:
    """Feed the parts (the next whenever the talker waits) and step to the end."""
    rid = f"r{id(parts)}"
    engine.add(
        SimpleNamespace(
            request_id=rid,
            prompt=parts[0],
            params=params,
            streaming_input=len(parts) > 1,
            stream_outputs=True,
        )
    )
    codes: list[int] = []
    sent = 1
    while True:
        if sent < len(parts) and not engine.has_work():
            engine.add_input(rid, parts[sent], sent == len(parts) - 1)
            sent += 1
            continue
        assert engine.has_work()
        for out in engine.step():
            assert out.error is None, out.error
            codes += out.token_ids
            if out.finished:
                return codes


@pytest.mark.parametrize(("chat", "media"), [(TEXT_CHAT, {}), (AUDIO_CHAT, {"audio": [sine()]})])
def test_seeded_codes_equal_transformers(talker, hf3, chat, media):
    ref = reference(hf3, chat, sample=True, **media)
    assert drive(talker, chunks(ref, 1), SAMPLED) == ref["codes"]
    greedy = reference(hf3, chat, sample=False, **media)
    assert drive(talker, chunks(greedy, 1), GREEDY) == greedy["codes"] != ref["codes"]


def test_a_reply_fed_token_by_token_or_at_once_gives_the_same_codes(talker, hf3):
    ref = reference(hf3, TEXT_CHAT, sample=False)
    assert drive(talker, chunks(ref, THINKER_TOKENS), GREEDY) == ref["codes"]
    assert drive(talker, whole(ref), GREEDY) == ref["codes"]


def test_an_audio_and_image_prompt_gives_transformers_codes(talker, hf3):
    """Audio and an image in one prompt: the talker's 3D rope positions need the audio's length
    (transformers' ``get_rope_index`` reads ``audio_config.n_window``, which the talker's config
    lacks: the engine gives it the thinker's). The reference is given the same (qwen3_helpers'
    ``speech``); seeded sampling, every code group."""
    ref = speech(
        hf3, AUDIO_IMAGE_CHAT, THINKER_TOKENS, FRAMES, sample=True, seed=SEED,
        audio=[sine()], images=[image()],
    )  # fmt: skip
    parts = chunks(ref, 2)
    parts[0]["image_sizes"] = [(64, 64)]
    assert drive(talker, parts, SAMPLED) == ref["codes"]


@pytest.mark.parametrize("eos_at", [3, THINKER_TOKENS - 1])
def test_the_thinkers_eos_places_the_tts_eos_as_transformers(talker, hf3, eos_at):
    ref = reference(hf3, TEXT_CHAT, sample=False, eos_at=eos_at)
    assert ref["reply"][eos_at] == IM_END
    assert drive(talker, chunks(ref, 3), GREEDY) == ref["codes"]
    plain = reference(hf3, TEXT_CHAT, sample=False)
    assert eos_at == THINKER_TOKENS - 1 or plain["codes"] != ref["codes"]


def test_an_unknown_voice_and_a_bad_input_are_request_errors(talker):
    from omni_core import RequestError

    bad = SamplingParams(temperature=0.0, extra={"voice": "Nobody"})
    request = SimpleNamespace(request_id="v", prompt={}, params=bad, streaming_input=False)
    with pytest.raises(RequestError, match=r"'Nobody'.*aiden, chelsie, ethan"):
        talker.add(request)
    request = SimpleNamespace(
        request_id="b", prompt=[1, 2], params=GREEDY, streaming_input=False, stream_outputs=True
    )
    with pytest.raises(RequestError, match="qwen3-omni-talker"):
        talker.add(request)


def concurrently(engine: Any, requests: list[tuple[list[dict[str, Any]], SamplingParams]]) -> list:
    """Run the requests together (every part fed at once, ``on_finish`` style): their codes."""
    codes: dict[str, list[int]] = {}
    for n, (parts, params) in enumerate(requests):
        engine.add(
            SimpleNamespace(
                request_id=f"c{n}",
                prompt=parts[0],
                params=params,
                streaming_input=False,
                stream_outputs=True,
            )
        )
        codes[f"c{n}"] = []
    left = set(codes)
    while left:
        for out in engine.step():
            assert out.error is None, out.error
            codes[out.request_id] += out.token_ids
            if out.finished:
                left.discard(out.request_id)
    return list(codes.values())


def test_concurrent_requests_batched_give_each_ones_codes(talker, hf3):
    """Four requests of different prompt lengths (text and audio), greedy and seeded, stepped
    together: the same codes as each alone, in fewer talker forwards than steps (``max_batch: 1``
    gives 24 talker forwards here, checked to fail the bound) and one predictor forward per code
    group per step."""
    text = reference(hf3, TEXT_CHAT, sample=False)
    audio = reference(hf3, AUDIO_CHAT, sample=False, audio=[sine()])
    seeded = reference(hf3, TEXT_CHAT, sample=True)
    requests = [
        (whole(text), GREEDY),
        (whole(audio), GREEDY),
        (whole(seeded), SAMPLED),
        (whole(audio), SAMPLED),
    ]
    alone = [drive(talker, parts, params) for parts, params in requests]
    assert alone[:3] == [text["codes"], audio["codes"], seeded["codes"]]
    before = dict(talker.forwards)
    together = concurrently(talker, requests)
    assert together == alone
    talker_forwards = talker.forwards["talker"] - before["talker"]
    predictor_forwards = talker.forwards["predictor"] - before["predictor"]
    frames = sum(len(c) for c in alone) // talker.groups
    # alone: one talker forward per frame (+ the final eos step); batched: one per engine step
    assert talker_forwards <= FRAMES + 1 + len(requests)  # prefills are per request
    assert predictor_forwards == FRAMES * (talker.groups - 1) < frames * (talker.groups - 1)


def test_the_talker_bench_measures_batched_against_unbatched(talker):
    from omni_qwen3.talker_bench import measure

    rows = {(r.case, r.figure): r for r in measure(talker, (3,), 2)}
    case = "tiny, C=3, 2 frames max"
    assert rows[(f"{case}, batched", "requests/s")].baseline == pytest.approx(
        rows[(f"{case}, unbatched", "requests/s")].value
    )
    batched = rows[(f"{case}, batched", "talker forwards")].value
    assert batched < rows[(f"{case}, unbatched", "talker forwards")].value
    assert talker.batch == 64  # put back
