"""The vllm stage's grammar-compile executor (omni_core.kinds.vllm_grammar): an abandoned
request's compile stops blocking the others (queued: cancelled; running: left to a thread of its
own while a fresh one takes the queue), compile failures are kept for the request's 400, and a
grammar that admits no output fails its compile. No engine: compiles are stand-ins (events)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from omni_core.grammar import GrammarError
from omni_core.kinds.vllm_grammar import GrammarPool, check_admits_output, install

WAIT = 30  # seconds a future may take at most (a loaded machine), never reached when it works


def request(rid: str) -> SimpleNamespace:
    return SimpleNamespace(request_id=rid)


def blocking(started: threading.Event, release: threading.Event):
    def compile_(req):
        started.set()
        release.wait(WAIT)
        return f"grammar of {req.request_id}"

    return compile_


def test_an_abandoned_running_compile_no_longer_blocks_the_queue():
    pool = GrammarPool(workers=1, spare=2)
    started, release = threading.Event(), threading.Event()
    slow = pool.submit(blocking(started, release), request("gone"))
    assert started.wait(WAIT)
    queued_gone = pool.submit(lambda r: "never", request("gone-too"))
    live = pool.submit(lambda r: f"grammar of {r.request_id}", request("live"))
    pool.prune(["live"])  # "gone" and "gone-too" were aborted
    assert live.result(WAIT) == "grammar of live"  # while the abandoned compile still runs
    assert queued_gone.cancelled() and not slow.done()
    assert (pool.cancelled, pool.abandoned, pool.busy) == (1, 1, 1)
    release.set()
    assert slow.result(WAIT) == "grammar of gone"  # it finishes on its own thread
    pool.shutdown(wait=True)


def test_without_pruning_the_queue_waits_as_in_vllm():
    """The behaviour prune changes: one worker, a running compile, the next waits for it."""
    pool = GrammarPool(workers=1)
    started, release = threading.Event(), threading.Event()
    pool.submit(blocking(started, release), request("a"))
    assert started.wait(WAIT)
    nxt = pool.submit(lambda r: "b", request("b"))
    pool.prune(["a", "b"])  # both alive: nothing abandoned
    assert not nxt.done()
    release.set()
    assert nxt.result(WAIT) == "b"
    pool.shutdown()


def test_small_specs_do_not_wait_behind_a_large_compile():
    pool = GrammarPool(workers=1, small_chars=10)
    started, release = threading.Event(), threading.Event()

    def job(rid: str, spec: str) -> SimpleNamespace:
        key = SimpleNamespace(structured_output_key=("json", spec))
        return SimpleNamespace(request_id=rid, structured_output_request=key)

    pool.submit(blocking(started, release), job("large", "x" * 11))
    assert started.wait(WAIT)
    small = pool.submit(lambda r: "json_object", job("small", ""))
    other_large = pool.submit(lambda r: "large too", job("large2", "y" * 11))
    assert small.result(WAIT) == "json_object"  # while the large compile runs, nothing pruned
    assert not other_large.done()
    release.set()
    assert other_large.result(WAIT) == "large too"
    pool.shutdown()


def test_abandoned_compiles_beyond_the_spare_keep_their_worker():
    pool = GrammarPool(workers=1, spare=0)
    started, release = threading.Event(), threading.Event()
    pool.submit(blocking(started, release), request("gone"))
    assert started.wait(WAIT)
    live = pool.submit(lambda r: "ok", request("live"))
    pool.prune(["live"])
    assert pool.abandoned == 0 and not live.done()  # bounded threads: it waits its turn
    release.set()
    assert live.result(WAIT) == "ok"
    pool.shutdown()


def test_failures_are_kept_for_the_request_and_carried_to_vllm():
    pool = GrammarPool(workers=1)

    def broken(req):
        raise RuntimeError("xgrammar: bad schema")

    future = pool.submit(broken, request("r1-abcd1234"))
    with pytest.raises(RuntimeError, match="bad schema"):
        future.result(WAIT)
    failure = pool.take_failure("r1")  # vLLM's internal id carries a suffix
    assert isinstance(failure, GrammarError) and "does not compile: xgrammar: bad schema" in str(
        failure
    )
    assert pool.take_failure("r1") is None  # once
    pool.shutdown()


def test_shutdown_cancels_what_is_queued():
    pool = GrammarPool(workers=1)
    started, release = threading.Event(), threading.Event()
    pool.submit(blocking(started, release), request("a"))
    assert started.wait(WAIT)
    queued = pool.submit(lambda r: "b", request("b"))
    release.set()
    pool.shutdown(wait=True, cancel_futures=True)
    assert queued.cancelled() or queued.result(WAIT) == "b"
    with pytest.raises(RuntimeError):
        pool.submit(lambda r: "c", request("c"))


def test_install_replaces_vllms_executor():
    from concurrent.futures import ThreadPoolExecutor

    manager = SimpleNamespace(executor=ThreadPoolExecutor(max_workers=3))
    pool = install(manager)
    assert manager.executor is pool and pool is not None and pool.workers == 3
    assert install(SimpleNamespace()) is None  # no tokenizer, no executor
    pool.shutdown()


xgr = pytest.importorskip("xgrammar")
VOCAB = ["<eos>", "{", "}", '"', "a", ":", " ", "1", "[", "]", ","]


def compiled(schema: dict) -> SimpleNamespace:
    info = xgr.TokenizerInfo(VOCAB, stop_token_ids=[0])
    ctx = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(schema))
    return SimpleNamespace(matcher=xgr.GrammarMatcher(ctx), vocab_size=len(VOCAB))


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"allOf": [{"$ref": "#"}]},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    ],
)
def test_a_grammar_that_admits_nothing_fails(schema):
    with pytest.raises(GrammarError, match="admits no output"):
        check_admits_output(compiled(schema))


@pytest.mark.parametrize(
    "schema",
    [{"type": "object"}, {"type": "object", "properties": {"a": {"$ref": "#"}}}, {"enum": [1]}],
)
def test_grammars_with_an_output_pass(schema):
    check_admits_output(compiled(schema))
    check_admits_output(SimpleNamespace())  # another backend's grammar: not checked


def test_large_compiles_run_nicer_than_the_engine_thread():
    import os

    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    pool = GrammarPool(workers=1, nice=5)
    got = pool.submit(
        lambda r: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), request("a")
    )
    assert got.result(WAIT) == min(19, base + 5)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's kept
    pool.shutdown()


def worker_with(pool: GrammarPool):
    """A vllm stage worker without its engine: what ``_take`` reads of a finished request."""
    from omni_core.kinds.vllm_worker import VllmWorkerEngine

    worker = VllmWorkerEngine.__new__(VllmWorkerEngine)
    worker.grammars, worker.grammar_of = pool, {}
    worker.faulty, worker.streamed, worker.sub_owner, worker.fresh = set(), {}, {}, set()
    return worker


def finished(rid: str, reason: str) -> SimpleNamespace:
    out = SimpleNamespace(token_ids=[5], text="!", finish_reason=reason, logprobs=None)
    return SimpleNamespace(request_id=rid, outputs=[out], finished=True)


def test_an_error_finish_of_a_structured_request_is_a_400_naming_its_field():
    pool = GrammarPool(workers=1)
    worker = worker_with(pool)
    worker.grammar_of["r1"] = ("response_format.json_schema", "r1-abcd1234")
    with pytest.raises(GrammarError) as err:  # a dead end after some tokens: no failure kept
        worker._take(finished("r1", "error"), [])
    assert err.value.param == "response_format.json_schema" and err.value.status_code == 400
    assert "rejected every next token" in str(err.value) and "r1" not in worker.grammar_of

    def empty(req):
        check_admits_output(compiled({"$ref": "#"}))

    with pytest.raises(GrammarError):
        pool.submit(empty, request("r2-abcd1234")).result(WAIT)
    worker.grammar_of["r2"] = ("tools[0].function.parameters", "r2-abcd1234")
    with pytest.raises(
        GrammarError, match=r"^'tools\[0\]\.function\.parameters': .*admits no output"
    ):
        worker._take(finished("r2", "error"), [])
    pool.shutdown()
