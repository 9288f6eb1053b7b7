"""Resumable vLLM requests (omni_core.kinds.vllm_session) on one real tiny-thinker engine, in
this process: interleaved context equal to fresh requests, the length cap that keeps the engine
alive, stop-now keeping the KV, hidden states captured across chunks."""

from __future__ import annotations

from typing import Any

import pytest

from omni_core import OmniSettings
from omni_core.models import resolve_model

MAX_MODEL_LEN = 96


@pytest.fixture(scope="module")
def engine():
    import torch

    torch.set_num_threads(1)
    from omni_core.kinds.vllm_session import build_engine, stop_now_processor

    model = resolve_model("tiny-thinker", OmniSettings().cache_dir)
    engine = build_engine(
        model,
        enforce_eager=True,
        kv_cache_memory_bytes=16 << 20,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=4,
        dtype="float32",
        seed=0,
        disable_log_stats=True,
        enable_prefix_caching=False,  # the hidden-state capture needs every position computed
        logits_processors=[stop_now_processor()],
    )
    yield engine
    del engine


def greedy(max_tokens: int) -> Any:
    from omni_core.kinds import vllm_adapter as va
    from omni_core.sampling import SamplingParams

    return va.sampling_params(
        SamplingParams(max_tokens=max_tokens, temperature=0.0, extra={"vllm": {"ignore_eos": True}})
    )


def fresh(engine, ids: list[int], max_tokens: int) -> list[int]:
    """A plain greedy request over ``ids``: its tokens."""
    from omni_core.kinds import vllm_adapter as va

    rid = f"fresh-{len(ids)}-{ids[-1]}"
    engine.add_request(rid, va.to_prompt(list(ids)), greedy(max_tokens))
    tokens: list[int] = []
    while True:  # (an idle session is an unfinished request too)
        for ro in engine.step():
            assert ro.request_id == rid
            tokens.extend(ro.outputs[0].token_ids)
            if ro.finished:
                return tokens


def segment(engine, session, stop_after: int | None = None) -> tuple[list[int], str]:
    """Step until the session's segment ends: its tokens and finish reason."""
    tokens: list[int] = []
    while True:
        for ro in engine.step():
            assert ro.request_id == session.request_id
            completion = ro.outputs[0]
            tokens.extend(completion.token_ids)
            if session.take(completion):
                return tokens, completion.finish_reason
            if stop_after is not None and len(tokens) >= stop_after:
                assert session.stop_now()
                stop_after = None


CHUNKS = [[11 + (i * 13) % 200 for i in range(n)] for n in (20, 9, 5)]


def test_each_segment_equals_a_fresh_request_over_the_interleaved_context(engine):
    from omni_core.kinds.vllm_session import ResumableSession

    session = ResumableSession(engine, "interleaved", MAX_MODEL_LEN)
    interleaved: list[int] = []  # chunk 1, segment 1, chunk 2, ... (built here, independently)
    try:
        for chunk in CHUNKS:
            interleaved += chunk
            context = session.append(chunk, greedy(6))
            tokens, reason = segment(engine, session)
            assert (len(tokens), reason) == (6, "length")
            assert tokens == fresh(engine, interleaved, 6)
            # what the segment was generated over: the last token re-fed at the chunk's head
            assert context == interleaved
            interleaved += tokens
        # only the chunks (and each re-fed last token) were prefilled, not the whole context
        assert session.prefilled == sum(map(len, CHUNKS)) + len(CHUNKS) - 1
    finally:
        session.close()
    assert engine.get_num_unfinished_requests() == 0  # closed: KV and slot freed


def test_the_length_cap_fails_the_chunk_and_the_engine_keeps_serving(engine):
    from omni_core.kinds.vllm_session import PromptTooLongError, ResumableSession

    session = ResumableSession(engine, "too-long", MAX_MODEL_LEN)
    chunk = [7 + i for i in range(40)]
    try:
        session.append(chunk, greedy(4))
        segment(engine, session)
        too_long = r"max_model_len \(96 tokens\): 43 tokens .* 41-token chunk .* = 100"
        with pytest.raises(PromptTooLongError, match=too_long):
            session.append(chunk, greedy(16))  # vLLM alone would take it: 41 + 16 <= 96
        assert session.segments == 1 and not session.generating
    finally:
        session.close()
    # vLLM checks each chunk alone: without the cap the engine would be dead now
    assert len(fresh(engine, [5, 6, 7], 3)) == 3


def test_a_chunk_longer_than_max_model_len_alone_is_prompt_too_long(engine):
    """vLLM's own check of the chunk (before ours) is turned into the same 400."""
    from omni_core.kinds.vllm_session import PromptTooLongError, ResumableSession

    session = ResumableSession(engine, "alone-too-long", MAX_MODEL_LEN)
    with pytest.raises(PromptTooLongError, match=r"max_model_len \(96 tokens\)"):
        session.append([7] * (MAX_MODEL_LEN + 1), greedy(4))
    session.close()
    assert len(fresh(engine, [5, 6, 7], 3)) == 3


def test_stop_now_ends_the_segment_and_keeps_the_kv(engine):
    from omni_core.kinds.vllm_session import ResumableSession

    stop_id = 9
    session = ResumableSession(engine, "barge-in", MAX_MODEL_LEN)
    try:
        session.append(CHUNKS[0], session.stop_params(greedy(60), stop_id))
        tokens, reason = segment(engine, session, stop_after=3)
        assert reason == "stop" and tokens[-1] == stop_id
        assert 3 < len(tokens) <= 5  # forced within a step or two, not after 60 tokens
        context = session.append(CHUNKS[1], greedy(5))
        assert session.prefilled == len(CHUNKS[0]) + 1 + len(CHUNKS[1])  # no re-prefill
        after, _ = segment(engine, session)
        assert context == CHUNKS[0] + tokens + CHUNKS[1]  # the stop token re-fed: nothing lost
        assert after == fresh(engine, context, 5)
    finally:
        session.close()
    assert session.stop_now() is False  # nothing generating


def test_hidden_states_run_on_across_chunks_as_a_fresh_request_over_the_context(engine):
    """Each take of a session's hidden states continues the previous one (a segment's first: its
    chunk's rows, the re-fed last token first); joined, they are a fresh request's rows over the
    same interleaved context."""
    import numpy as np

    from omni_core.kinds.vllm_session import ResumableSession, hidden_state_capture
    from omni_core.outputs import join_hidden_states

    capture = hidden_state_capture(engine, ["embeddings", "final"])
    session = ResumableSession(engine, "hidden", MAX_MODEL_LEN, capture=capture)
    chunks, starts, firsts = [], [], []
    try:
        for chunk in CHUNKS:
            firsts.append(len(session.context))
            context = session.append(chunk, greedy(4))
            new = True
            while session.generating:
                for ro in engine.step():
                    states = session.hidden_states()
                    session.take(ro.outputs[0])
                    if states is not None:
                        chunks.append(states)
                        if new:
                            starts.append(states.start)
                            assert states.rows == len(context) - states.start  # chunk's rows
                            new = False
        rows = join_hidden_states(chunks)  # raises unless each take continues the previous
    finally:
        session.close()
    assert starts == firsts
    assert len(rows["final"]) == len(context) + 3  # the last segment's last token: never fed
    whole = context + session.segment[:-1]
    engine_id = engine.add_request("hidden-fresh", _prompt(whole), greedy(1))
    capture.watch(engine_id, "hidden-fresh")
    fresh_rows = None
    while fresh_rows is None:
        for ro in engine.step():
            fresh_rows = capture.take("hidden-fresh", ro.finished)
    for name in ("embeddings", "final"):
        np.testing.assert_allclose(rows[name], fresh_rows.layers[name], rtol=1e-4, atol=1e-4)


def _prompt(ids: list[int]) -> Any:
    from omni_core.kinds import vllm_adapter as va

    return va.to_prompt(list(ids))


@pytest.mark.parametrize(
    ("layers", "names"),
    [(["hidden"], "unknown layer 'hidden'"), (["layer:0"], "layer:0")],
)
def test_an_unknown_capture_layer_is_a_config_error_up_front(layers, names):
    """Checked where the capture is made (it used to fail inside the model's forward hook, which
    ends the stage); 0 / -1 are the documented aliases of embeddings / final."""
    from omni_core import ConfigError
    from omni_core.kinds.vllm_session import hidden_state_capture

    with pytest.raises(ConfigError, match=names):
        hidden_state_capture(None, layers)
