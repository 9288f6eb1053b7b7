"""``qwen2.5-omni-duplex-text`` (issue 29 item 2): the conversation lives in the engine, one
resumable vLLM request per session; each turn prefills only the new turn; a barge-in stops the
reply on the next decode step with the KV kept; a turn past ``max_model_len`` is one error event
and the engine keeps serving. One engine for the module."""

from __future__ import annotations

import asyncio

import pytest
from omni_duplex import protocol as P
from omni_qwen.duplex import MAX_MODEL_LEN, resumable_pipeline, turn

from omni_core import OmniSettings, create_engine

SLOTS = 2  # vLLM sequence slots: an idle session holds one
TEXT = {"turn_detection": None, "max_output_tokens": 16, "output_modalities": ["text"]}


@pytest.fixture(scope="module")
def engine(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=600.0, shutdown_timeout_s=5)
    config = resumable_pipeline()
    config.stages[0].engine_args["options"]["max_num_seqs"] = SLOTS
    engine = create_engine(config, settings=settings)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_qwen))


async def state(engine) -> dict:
    (s,) = await engine.collective_rpc("get_state", stage_ids=[0])
    return s


async def until(session, *types):
    seen = []
    async with asyncio.timeout(120):
        while True:
            event = await session.recv()
            seen.append(event)
            if event.type in types:
                return seen


async def ask(session, text: str) -> list:
    session.send(P.AppendText(text=text, commit=True))
    session.send(P.CreateResponse())
    return await until(session, P.RESPONSE_DONE)


def test_each_turn_prefills_only_the_new_turn(engine, tokenizer):
    async def go():
        s = await engine.open_session(TEXT)
        prefill, news, contexts = [], [], []
        for i in range(10):
            text = f"Turn {i}: what should I cook tonight?"
            before = (await state(engine))["prefilled_tokens"]
            done = (await ask(s, text))[-1]
            assert done.data["status"] == "completed"
            after = await state(engine)
            prefill.append(after["prefilled_tokens"] - before)
            contexts.append(after["contexts"][s.id])
            rendered = turn("user", text) + "<|im_start|>assistant\n"
            news.append(len(tokenizer.encode(rendered, add_special_tokens=False)))
        await s.close()
        return prefill, news, contexts

    prefill, news, contexts = asyncio.run(go())
    # turn 1 carries the system turn; from then on only the new turn (+ the re-fed end of turn)
    assert all(p <= 2 * n for p, n in zip(prefill[1:], news[1:], strict=True)), (prefill, news)
    assert max(prefill[1:]) - min(prefill[1:]) <= 2  # flat, not growing
    # the fresh-request-per-turn fallback would prefill the whole context each turn
    assert contexts[-1] > 5 * prefill[-1], (contexts, prefill)


def test_a_barge_in_stops_the_reply_next_step_and_keeps_the_conversation(engine):
    async def go():
        s = await engine.open_session({**TEXT, "max_output_tokens": MAX_MODEL_LEN // 2})
        s.send(P.AppendText(text="Tell me a very long story.", commit=True))
        s.send(P.CreateResponse())
        seen = await until(s, P.TEXT_DELTA)
        prompt = (await state(engine))["contexts"][s.id]  # the reply joins it when it ends
        s.send(P.CancelResponse())
        seen += await until(s, P.RESPONSE_DONE)
        while s.id in (await state(engine))["generating"]:  # the segment ends (any way)
            await asyncio.sleep(0.02)
        cut = (await state(engine))["contexts"][s.id]
        nxt = await ask(s, "And then?")  # the same live request goes on
        after = await state(engine)
        await s.close()
        return seen[-1].data, cut - prompt, nxt[-1].data, after

    cancelled, reply, nxt, after = asyncio.run(go())
    assert cancelled["status"] == "cancelled" and nxt["status"] == "completed"
    # the reply kept in the context ends a few steps after the cancel, far from its 1024 tokens
    assert 0 < reply < 64, reply
    assert after["sessions"] >= 1 and after["unfinished"] >= 1  # the live request (its KV) kept


def test_a_session_growing_past_max_model_len_starts_over_and_a_too_long_turn_fails_alone(engine):
    """Each turn fits alone (vLLM checks chunks alone: a session grown past the limit would kill
    the engine). The turn that takes the running context past it starts a new conversation in
    the engine (issue 34: it failed, with one error); a turn too long alone fails with one error
    naming ``max_model_len``, and the session's next turn works; other sessions are served."""

    async def go():
        s = await engine.open_session(TEXT)
        trims = (await state(engine))["trims"]
        grown = [await ask(s, "hello " * (MAX_MODEL_LEN // 4)) for _ in range(5)]
        contexts = (await state(engine))["contexts"][s.id]
        too_long = await ask(s, "hello " * MAX_MODEL_LEN)
        other = await engine.open_session(TEXT)
        small = await ask(other, "Hi.")
        again = await ask(s, "hi")
        after = await state(engine)
        await s.close()
        await other.close()
        return grown, contexts, too_long, small, again, after["trims"] - trims

    grown, context, too_long, small, again, trims = asyncio.run(go())
    assert [seen[-1].data["status"] for seen in grown] == ["completed"] * 5
    assert not any(e.type == P.ERROR for seen in grown for e in seen)
    assert trims >= 1 and context <= MAX_MODEL_LEN
    errors = [e for e in too_long if e.type == P.ERROR]
    assert len(errors) == 1 and "max_model_len" in errors[0].data["message"], errors
    assert too_long[-1].data["status"] == "failed"
    assert small[-1].data["status"] == "completed"
    assert again[-1].data["status"] == "completed"


def test_a_turn_waiting_for_a_slot_gets_one_as_soon_as_a_session_goes_idle(engine):
    """Issue 34 item 2: with every sequence slot generating, one more session's turn waits in
    vLLM's queue; it used to wait for ``idle_s`` (300 s: past this test's 120 s timeout), now a
    session that goes idle gives up its slot at once."""

    async def go():
        sessions = [await engine.open_session({**TEXT, "max_output_tokens": 48}) for _ in range(3)]
        for s in sessions:
            s.send(P.AppendText(text="Tell me a story.", commit=True))
            s.send(P.CreateResponse())
        done = [(await until(s, P.RESPONSE_DONE))[-1].data["status"] for s in sessions]
        live = (await state(engine))["sessions"]
        for s in sessions:
            await s.close()
        return done, live

    done, live = asyncio.run(go())
    assert done == ["completed"] * 3 and live <= SLOTS


def test_more_sessions_than_slots_are_served_by_closing_the_least_recent_idle_one(engine):
    """Every session holds a slot between its turns; with all held, a new session's turn closes
    the least recently used idle one instead of waiting for a slot forever."""

    async def go():
        sessions = [await engine.open_session(TEXT) for _ in range(SLOTS + 2)]
        done = [(await ask(s, "Hi."))[-1].data["status"] for s in sessions]
        live = (await state(engine))["sessions"]
        for s in sessions:
            await s.close()
        return done, live

    done, live = asyncio.run(go())
    assert done == ["completed"] * (SLOTS + 2) and live <= SLOTS


def test_spoken_turns_are_appended_as_audio(engine):
    """Two spoken turns (a speech clip each) in one live request: each is prefilled once, as
    the audio encoder's placeholder tokens (~25 per second), not re-prefilled by the next."""
    from omni_duplex.audio import encode_pcm16, resample
    from omni_duplex.vad_eval import CLIP_DIR, RATE, load_speech

    (clip,) = load_speech(CLIP_DIR, "speech_question.wav")
    pcm = encode_pcm16(resample(clip, RATE, 24_000))

    async def go():
        s = await engine.open_session(TEXT)
        prefill = []
        for _ in range(2):
            before = (await state(engine))["prefilled_tokens"]
            s.send(P.AppendAudio(audio=pcm))
            s.send(P.Commit(create_response=True))
            done = (await until(s, P.RESPONSE_DONE))[-1]
            assert done.data["status"] == "completed", done.data
            prefill.append((await state(engine))["prefilled_tokens"] - before)
        await s.close()
        return prefill

    first, second = asyncio.run(go())
    assert second >= 20  # the clip's audio tokens (a text note would be a few tokens)
    assert second < first  # the second turn did not re-prefill the first one
