"""The ``python`` stage kind: functions, sync and async generators, errors, abort."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from omni_core import ConfigError
from tests.helpers import collect

ENGINE_CODE = textwrap.dedent("""
    import asyncio, threading, time

    def where(prompt, params):
        return threading.current_thread().name

    def where_each(prompt, params):
        yield threading.current_thread().name

    def upper(prompt, params):
        return prompt.upper()

    def words(prompt, params):
        for word in prompt.split():
            yield word + " "

    async def ticks(prompt, params, count=3):
        for i in range(count):
            await asyncio.sleep(0.001)
            yield [i]

    async def slow(prompt, params):
        for i in range(1000):
            await asyncio.sleep(0.01)
            yield [i]

    def broken(prompt, params):
        raise ValueError("bad input for this model")

    GATE = threading.Event()  # set by the test once it received the first item

    def first_then_block(prompt, params):
        yield "first"
        GATE.wait()
        yield "second"

    async def first_then_block_async(prompt, params):
        yield "first"
        await asyncio.to_thread(GATE.wait)
        yield "second"

    def already_finished(prompt, params):
        from omni_core.outputs import StageOutput
        yield "a"
        yield StageOutput(request_id="", text="b", finished=True, finish_reason="length")
        yield "never"
""")


@pytest.fixture
def user_module(tmp_path):
    (tmp_path / "user_engines.py").write_text(ENGINE_CODE)
    sys.path.insert(0, str(tmp_path))
    yield "user_engines"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("user_engines", None)


def pipeline(callable_: str, kwargs: str = "{}") -> str:
    return f"""
name: py
stages:
  - {{id: 0, name: s, kind: python, engine_args: {{callable: "{callable_}", kwargs: {kwargs}}}, final_output: true}}
"""


async def test_function_returns_one_whole_result(make_engine, user_module):
    outs = await collect(make_engine(pipeline("user_engines:upper")), "hi there")
    assert [(o.text, o.finished, o.finish_reason) for o in outs] == [("HI THERE", True, "stop")]


async def test_sync_generator_streams(make_engine, user_module):
    outs = await collect(make_engine(pipeline("user_engines.words")), "a b c")
    assert [o.text for o in outs] == ["a ", "b ", "c ", ""]
    assert [o.finished for o in outs] == [False, False, False, True]


async def test_async_generator_with_kwargs_streams_token_ids(make_engine, user_module):
    outs = await collect(make_engine(pipeline("user_engines:ticks", "{count: 4}")), "x")
    assert [o.token_ids for o in outs] == [[0], [1], [2], [3], []]


@pytest.mark.parametrize("func", ["first_then_block", "first_then_block_async"])
async def test_each_item_is_delivered_as_it_is_yielded(make_engine, user_module, func):
    """The generator blocks after its first item until the caller has received it: before, the
    first item was held back until the next one was yielded, so this never got past it."""
    import user_engines

    user_engines.GATE.clear()
    gen = make_engine(pipeline(f"user_engines:{func}")).generate("x")
    first = await asyncio.wait_for(gen.__anext__(), 60)  # a hang guard, not a timing assert
    assert (first.text, first.finished) == ("first", False)
    user_engines.GATE.set()
    rest = [o async for o in gen]
    assert [(o.text, o.finished) for o in rest] == [("second", False), ("", True)]
    assert rest[-1].finish_reason == "stop"


async def test_a_yielded_finished_output_ends_the_request(make_engine, user_module):
    outs = await collect(make_engine(pipeline("user_engines:already_finished")), "x")
    assert [(o.text, o.finished, o.finish_reason) for o in outs] == [
        ("a", False, None),
        ("b", True, "length"),
    ]


async def test_exception_is_a_request_scoped_error(make_engine, user_module):
    engine = make_engine(pipeline("user_engines:broken"))
    [out] = await collect(engine, "x")
    assert out.finish_reason == "error" and out.error.type == "ValueError"
    assert "bad input for this model" in out.error.message
    assert engine.is_alive()


async def test_abort_cancels_the_callable(make_engine, user_module):
    engine = make_engine(pipeline("user_engines:slow"))
    gen = engine.generate("x", request_id="r")
    await gen.__anext__()
    result = await engine.abort_async("r")
    assert result.outputs[-1].finished and result.outputs[-1].finish_reason == "abort"
    assert result.outputs[-1].token_ids[:1] == [0]
    await asyncio.sleep(0.03)
    assert engine.num_active_requests == 0


async def test_sync_callables_run_off_the_orchestrator_thread(make_engine, user_module):
    for func in ("user_engines:where", "user_engines:where_each"):
        out = (await collect(make_engine(pipeline(func)), "x"))[0]
        assert out.text and out.text != "omni-orchestrator", func


def test_unimportable_callable_is_a_config_error(make_engine):
    with pytest.raises(
        ConfigError,
        match=r"stage 's' \(id 0\): field 'engine_args.callable'.*cannot import 'nowhere:func'",
    ):
        make_engine(pipeline("nowhere:func"))
