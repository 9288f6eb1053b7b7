"""``omni serve qwen2.5-omni-duplex`` (issue 29) driven by the official ``openai`` package's
realtime client: a spoken question (one of omni-duplex's speech clips) reaches the thinker as
audio (the audio placeholder tokens are in the thinker's prompt ids) and the reply streams as text
and audio deltas; a cancelled reply and ``conversation.item.truncate``; the per-turn prefill of
the fresh-request-per-turn path; a session pushed past the thinker's ``max_model_len`` gets one
error event and the engine keeps serving other sessions. One server for the module."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import subprocess
import sys
import threading
import wave
from pathlib import Path
from typing import Any

import openai
import pytest
from omni_duplex.audio import encode_pcm16, resample
from omni_duplex.vad_eval import CLIP_DIR, RATE, load_speech
from omni_qwen.duplex import MAX_MODEL_LEN, duplex_pipeline

from omni_core import OmniSettings
from omni_core.testing.server import running_server

AUDIO_TOKEN, AUDIO_BOS = 4003, 4004  # tiny-qwen2.5-omni's <|AUDIO|> and <|audio_bos|>
NO_VAD = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
TEXT_ONLY = {**NO_VAD, "max_output_tokens": 4, "output_modalities": ["text"]}


def clip(name: str = "speech_question") -> str:
    (samples,) = load_speech(CLIP_DIR, f"{name}.wav")
    return base64.b64encode(encode_pcm16(resample(samples, RATE, 24_000))).decode()


class Recorder:
    """The plans of every response and the talker's inputs (wrapping the shared plug and the
    talker bridge). ``fresh``: plan the next responses as the fallback (a fresh thinker request
    each); ``greedy``: a greedy talker and a seeded token2wav (the same reply, the same audio)."""

    def __init__(self, model: Any) -> None:
        import msgspec
        import omni_qwen.bridge as bridge
        from omni_qwen.duplex_speech import FRESH_KEY

        self.lock = threading.Lock()
        self.prompts: list[list[int]] = []  # the thinker's prompt ids, as the talker got them
        self.talker: list[list[dict[str, Any]]] = []  # the talker's inputs, per response
        self.plans: list[Any] = []
        self.fresh = False
        self.greedy = False
        plan, chunk = model.plan_response, bridge.thinker_chunk

        def recording_chunk(*args: Any) -> Any:
            out = chunk(*args)
            if out is not None:
                with self.lock:
                    if "prompt_ids" in out:
                        self.prompts.append(list(out["prompt_ids"]))
                        self.talker.append([])
                    self.talker[-1].append(out)
            return out

        def recording_plan(context: Any) -> Any:
            result = plan(context)
            params = result.params
            if self.fresh:
                first = params[0]
                params[0] = msgspec.structs.replace(first, extra={**first.extra, FRESH_KEY: True})
            if self.greedy:  # (a few codes: enough to compare, cheap to voice)
                params[1] = msgspec.structs.replace(params[1], temperature=0.0, max_tokens=12)
                params[2] = msgspec.structs.replace(params[2], seed=7)
            with self.lock:
                self.plans.append(result)
            return result

        model.plan_response = recording_plan
        bridge.thinker_chunk = recording_chunk  # thinker_to_talker calls it by name
        self.restore = lambda: setattr(bridge, "thinker_chunk", chunk)


@pytest.fixture(scope="module")
def served(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=600.0, shutdown_timeout_s=5)
    with running_server(duplex_pipeline(), settings=settings, entry_points=True) as (base, eng, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        rec = Recorder(eng.orchestrator.sessions.model)
        yield client, eng, rec, base
        rec.restore()


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def until(conn: Any, *types: str) -> list[Any]:
    seen = []
    while True:
        event = conn.recv()
        seen.append(event)
        if event.type in types:
            return seen


def prefilled(engine: Any) -> int:
    """Prompt tokens the thinker stage sent to prefill so far (the vllm kind's ``get_state``)."""
    (state,) = asyncio.run(engine.collective_rpc("get_state", stage_ids=[0]))
    return int(state["prefilled_tokens"])


def test_a_spoken_question_reaches_the_thinker_as_audio_and_the_reply_streams(served):
    client, _, rec, _ = served
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={**NO_VAD, "max_output_tokens": 8})
        until(conn, "session.updated")
        conn.input_audio_buffer.append(audio=clip())
        conn.input_audio_buffer.commit()
        conn.response.create()
        seen = until(conn, "response.done", "error")
    kinds = [e.type for e in seen]
    assert seen[-1].type == "response.done" and seen[-1].response.status == "completed", seen[-1]
    assert "response.output_text.delta" in kinds and "response.output_audio.delta" in kinds
    prompt = rec.prompts[-1]
    assert prompt.count(AUDIO_BOS) == 1 and prompt.count(AUDIO_TOKEN) >= 20  # ~1 s of speech
    assert "<|audio_bos|><|AUDIO|><|audio_eos|><|im_end|>" in rec.plans[-1].prompt["prompt"]


def test_cancel_then_truncate_keeps_only_what_was_heard(served):
    client, engine, rec, _ = served
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        conn.recv()
        conn.session.update(session={**NO_VAD, "max_output_tokens": 64})
        until(conn, "session.updated")
        conn.conversation.item.create(item=user("Tell me a story."))
        conn.response.create()
        until(conn, "response.output_audio.delta")
        conn.response.cancel()
        done = until(conn, "response.done")[-1].response
        assert done.status == "cancelled"
        (item,) = done.output
        transcript, audio_ms = item.content[0].transcript, done.model_extra["audio_ms"]
        assert len(transcript.split()) >= 4 and audio_ms > 0
        conn.conversation.item.truncate(
            item_id=item.id, content_index=0, audio_end_ms=audio_ms // 2
        )
        truncated = until(conn, "conversation.item.truncated", "error")[-1]
        assert truncated.type == "conversation.item.truncated", truncated
        conn.conversation.item.create(item=user("And then?"))
        conn.response.create()
        until(conn, "response.created")
        prompt = rec.plans[-1].prompt["full"]["prompt"]
        conn.response.cancel()
        until(conn, "response.done")
        resets = state(engine)["resets"]
    # the live request held the whole reply: the thinker restarted from the conversation
    assert resets >= 1
    heard = prompt.split("<|im_start|>assistant\n")[-2].split("<|im_end|>")[0]
    assert heard and len(heard) < len(transcript) and transcript.startswith(heard)


def conversation(client: Any, engine: Any, turns: int) -> tuple[list[int], list[int]]:
    """``turns`` typed turns in one session (text replies): the thinker's prefill per turn and
    the context its live request holds after each (the fallback: none)."""
    per_turn, contexts = [], []
    others = set(state(engine)["contexts"])  # other sessions' live requests
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        conn.recv()
        conn.session.update(session=TEXT_ONLY)
        until(conn, "session.updated")
        for i in range(turns):
            before = prefilled(engine)
            conn.conversation.item.create(item=user(f"Turn {i}: what is the weather like?"))
            conn.response.create()
            assert until(conn, "response.done")[-1].response.status == "completed"
            after = state(engine)
            per_turn.append(int(after["prefilled_tokens"]) - before)
            mine = [n for key, n in after["contexts"].items() if key not in others]
            contexts.append(mine[0] if len(mine) == 1 else 0)
    return per_turn, contexts


def test_each_turn_prefills_only_the_new_turn_and_the_fallback_the_whole_history(served, tiny_qwen):
    """Issue 29's must-show, same conversation, same engine: resumable, each turn after the
    first prefills at most 2x the new turn's tokens (flat); the fallback (a fresh thinker request
    per response) prefills the whole history each turn (growing)."""
    from omni_qwen.duplex import turn
    from transformers import AutoTokenizer

    client, engine, rec, _ = served
    resumable, contexts = conversation(client, engine, 10)
    rec.fresh = True
    try:
        fallback, _ = conversation(client, engine, 10)
    finally:
        rec.fresh = False
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen))
    rendered = [turn("user", f"Turn {i}: what is the weather like?") for i in range(10)]
    news = [
        len(tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False))
        for text in rendered
    ]
    assert all(p <= 2 * n for p, n in zip(resumable[1:], news[1:], strict=True)), (resumable, news)
    assert max(resumable[1:]) - min(resumable[1:]) <= 2, resumable  # flat
    assert all(a < b for a, b in itertools.pairwise(fallback)), fallback  # grows every turn
    # the fallback's last prompt: the whole conversation the live request held, + the new turn
    assert fallback[-1] > contexts[-2] > 5 * resumable[-1], (fallback, contexts, resumable)


def test_the_talker_gets_the_same_input_and_speaks_the_same_as_the_fallback(served):
    """Greedy talker, seeded token2wav, a 2-turn conversation with spoken replies: the resumable
    thinker hands the talker the whole context's ids and rows as a fresh request over the
    conversation does, so the talker's prompt and the reply audio are the same. (The fallback
    re-tokenizes each earlier reply's text; the live request holds the tokens the thinker
    generated: equal here, where the replies' text tokenizes back to the same ids.)"""
    import numpy as np

    client, engine, rec, _ = served

    def talk() -> tuple[list[list[dict[str, Any]]], list[bytes], list[int]]:
        start = len(rec.talker)
        audio, prefill = [], []
        with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
            conn.recv()
            conn.session.update(session={**NO_VAD, "max_output_tokens": 6})
            until(conn, "session.updated")
            for i in range(2):
                before = prefilled(engine)
                conn.conversation.item.create(item=user(f"Turn {i}: what is the weather like?"))
                conn.response.create()
                seen = until(conn, "response.done")
                prefill.append(prefilled(engine) - before)
                assert seen[-1].response.status == "completed", seen[-1]
                deltas = [e.delta for e in seen if e.type == "response.output_audio.delta"]
                audio.append(b"".join(base64.b64decode(d) for d in deltas))
        return rec.talker[start:], audio, prefill

    rec.greedy = True
    try:
        resumable, audio, prefill = talk()
        rec.fresh = True
        fallback, fallback_audio, fallback_prefill = talk()
    finally:
        rec.greedy = rec.fresh = False
    # the second turn: only the new turn on the live request; the whole history when fresh
    assert prefill[0] == fallback_prefill[0] and prefill[1] < fallback_prefill[1] / 2, (
        prefill,
        fallback_prefill,
    )
    assert len(resumable) == len(fallback) == 2
    for mine, theirs in zip(resumable, fallback, strict=True):
        assert mine[0]["prompt_ids"] == theirs[0]["prompt_ids"]
        assert [c.get("start") for c in mine] == [c.get("start") for c in theirs]
        for name in ("embeddings", "final"):
            np.testing.assert_allclose(
                np.concatenate([c[name] for c in mine]),
                np.concatenate([c[name] for c in theirs]),
                rtol=1e-4,
                atol=1e-4,
            )
        assert sum(len(c["token_ids"]) for c in mine) >= 2  # a reply the talker speaks
    assert all(audio) and [len(a) for a in audio] == [len(a) for a in fallback_audio]
    assert audio == fallback_audio
    assert len(resumable[1][0]["prompt_ids"]) > len(resumable[0][0]["prompt_ids"])  # history


def test_a_too_long_turn_fails_alone_and_a_long_conversation_leaves_out_its_oldest_turns(served):
    """Issue 34 item 3: a turn too long for the thinker's ``max_model_len`` is one error naming
    it, and the session's next turn ("hi") works (the stage re-sent the whole conversation,
    refused again, until the long turn fell out of the 64-item history); a conversation growing
    past ``max_model_len`` leaves out its oldest items (it failed at turn 4 of these); other
    sessions are served."""
    client, engine, rec, _ = served
    errors: list[Any] = []

    def ask(conn: Any, text: str) -> str:
        conn.conversation.item.create(item=user(text))
        conn.response.create()
        seen = until(conn, "response.done")
        errors.extend(e for e in seen if e.type == "error")
        return str(seen[-1].response.status)

    others = set(state(engine)["contexts"])
    trims = state(engine)["trims"]
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        conn.recv()
        conn.session.update(session=TEXT_ONLY)
        until(conn, "session.updated")
        assert ask(conn, "Hi.") == "completed"
        assert ask(conn, "hello " * MAX_MODEL_LEN) == "failed"
        assert len(errors) == 1 and "max_model_len" in errors[0].error.message, errors
        assert ask(conn, "hi") == "completed"
        full = rec.plans[-1].prompt["full"]["prompt"]
        assert "Hi." in full and "hello " * 8 not in full  # the earlier turns stay, not it
        statuses = [ask(conn, f"Turn {i}: " + "hello " * (MAX_MODEL_LEN // 4)) for i in range(6)]
        after = state(engine)
        with client.realtime.connect(model="qwen2.5-omni-duplex") as other:
            other.recv()
            other.session.update(session=TEXT_ONLY)
            until(other, "session.updated")
            assert ask(other, "Hi.") == "completed"
    assert statuses == ["completed"] * 6 and len(errors) == 1, (statuses, errors)
    assert after["trims"] > trims
    (context,) = [n for key, n in after["contexts"].items() if key not in others]
    assert context <= MAX_MODEL_LEN


def test_a_barge_in_stops_the_thinker_within_a_few_decode_steps(served, monkeypatch):
    """The reply is cancelled while the thinker still has ~1800 tokens to go: once its request is
    gone from the stage, it had generated only a few tokens after the session applied the cancel
    (every thinker output the session received is counted, dropped ones included)."""
    from omni_duplex.session import SessionRunner

    client, engine, _, _ = served
    log: list[tuple[str, int]] = []
    on_output, cancel = SessionRunner._on_output, SessionRunner._cancel

    async def recording_output(self: Any, out: Any) -> None:
        if out.stage_id == 0:
            log.append(("tokens", len(out.token_ids)))
        await on_output(self, out)

    async def recording_cancel(self: Any, reason: str) -> None:
        log.append(("cancel", 0))
        await cancel(self, reason)

    monkeypatch.setattr(SessionRunner, "_on_output", recording_output)
    monkeypatch.setattr(SessionRunner, "_cancel", recording_cancel)
    with client.realtime.connect(model="qwen2.5-omni-duplex") as conn:
        conn.recv()
        conn.session.update(session={**NO_VAD, "max_output_tokens": MAX_MODEL_LEN - 200})
        until(conn, "session.updated")
        conn.conversation.item.create(item=user("Tell me a very long story."))
        conn.response.create()
        until(conn, "response.output_text.delta")
        conn.response.cancel()
        assert until(conn, "response.done")[-1].response.status == "cancelled"
        while state(engine)["generating"]:  # the reply's segment ended (the KV is kept)
            threading.Event().wait(0.05)
        threading.Event().wait(0.5)  # outputs already on their way
    at = log.index(("cancel", 0))
    before = sum(n for _, n in log[:at])
    after = sum(n for _, n in log[at:])
    assert before >= 1 and after < 16, (before, after)  # a few decode steps
    assert before + after < MAX_MODEL_LEN - 200 - 1000  # far from the end of the reply


def state(engine: Any) -> dict[str, Any]:
    """The thinker stage's ``get_state`` (omni_qwen.duplex_speech)."""
    (found,) = asyncio.run(engine.collective_rpc("get_state", stage_ids=[0]))
    return dict(found)


def test_omni_duplex_talk_over_url(served, tmp_path):
    """``omni duplex talk`` streams a spoken clip to ``omni serve qwen2.5-omni-duplex`` (server
    VAD) and writes the spoken reply and the timeline."""
    base = served[3]
    url = base.replace("http://", "ws://") + "/v1/realtime"
    wav = CLIP_DIR / "speech_question.wav"
    cmd = [sys.executable, "-m", "omni_core.cli", "duplex", "talk", str(wav), "--url", url]
    options = ["--max-output-tokens", "8", "--silence-ms", "200", "--out", str(tmp_path)]
    result = subprocess.run(cmd + options, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reply, timeline = (Path(p) for p in result.stdout.strip().splitlines()[-2:])
    with wave.open(str(reply)) as w:
        assert w.getframerate() == 24_000 and w.getnframes() > 0
    events = [json.loads(line)["event"] for line in timeline.read_text().splitlines()]
    kinds = [e["type"] for e in events]
    assert "input_audio_buffer.speech_started" in kinds and "response.output_audio.delta" in kinds
    statuses = [e["response"]["status"] for e in events if e["type"] == "response.done"]
    assert statuses and statuses[0] == "completed"


def test_a_spoken_reply_streams_an_audio_delta_per_token2wav_chunk(served):
    """Streamed token2wav (issue 27): one ``response.output_audio.delta`` per token2wav chunk, the
    first while the thinker's text deltas still come. Whole-utterance audio would be one delta
    after the talker's last code (measured so: 424 text deltas, then 1 audio delta).

    Deterministic (issue 41: once 1 delta under load): the thinker is greedy and here the talker
    and token2wav are seeded, so the reply's codes, and with them its token2wav chunks (fixed
    sizes, whatever the timing), are the same in every run; an unseeded talker could sample its
    stop code before a second chunk's codes."""
    import msgspec

    audio, text = "response.output_audio.delta", "response.output_text.delta"
    kinds: list[str] = []
    model = served[1].orchestrator.sessions.model
    plan = model.plan_response

    def seeded(context: Any) -> Any:
        result = plan(context)
        params = result.params
        params[1] = msgspec.structs.replace(params[1], seed=3)  # talker
        params[2] = msgspec.structs.replace(params[2], seed=7)  # token2wav
        return result

    model.plan_response = seeded
    try:
        with served[0].realtime.connect(model="qwen2.5-omni-duplex") as conn:
            conn.recv()
            conn.session.update(session={**NO_VAD, "max_output_tokens": 450})  # a long reply
            until(conn, "session.updated")
            conn.conversation.item.create(item=user("Tell me about the sea."))
            conn.response.create()
            done = False
            while kinds.count(audio) < 2 and not done:  # two chunks will do: the rest is cancelled
                kinds.append(conn.recv().type)
                done = kinds[-1] in ("response.done", "error")
            if not done:
                conn.response.cancel()
                until(conn, "response.done")
    finally:
        model.plan_response = plan
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds) if k in (audio, text)]
    assert kinds.count(audio) >= 2, runs  # per chunk, not one per reply
    assert text in kinds[kinds.index(audio) :], runs  # speech while the thinker still replies


def test_the_sessions_voice_reaches_the_talker_and_token2wav():
    """``session.audio.output.voice`` (omni-duplex's GA session): the plug declares the
    speakers and sends the chosen one as every stage's ``params.extra["voice"]``."""
    from types import SimpleNamespace

    from omni_duplex.config import SessionConfig
    from omni_duplex.model import ResponseContext, UserTurn
    from omni_qwen.duplex import build_model

    from omni_core.sampling import SamplingParams

    model = build_model(SimpleNamespace(config=duplex_pipeline()), None)
    assert model.voices == ("Chelsie", "Ethan")
    defaults = {sid: SamplingParams() for sid in range(3)}
    turn = [UserTurn("item_1", None, "hi", 0.0)]
    for voice, text_only in (("Ethan", False), (None, False), ("Ethan", True)):
        modalities = ["text"] if text_only else ["audio"]
        config = SessionConfig(voice=voice, output_modalities=modalities)
        plan = model.plan_response(ResponseContext(config, turn, [], defaults, {}, "s1"))
        voices = [params.extra.get("voice") for params in plan.params.values()]
        assert voices == [voice if not text_only else None] * 3, (voice, text_only)
