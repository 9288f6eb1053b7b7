"""Property: no caller input raises inside the orchestrator loop.

Arbitrary request ids and sampling-params mappings, sent together (duplicates, children's ids,
companions' ids, NaN, huge integers, wrong types, unknown stages and fields), some closed early:
each call is either refused with RequestError before anything runs or ends with exactly one
terminal output; the engine stays alive and holds nothing once they are done.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_core import RequestError, SamplingParams
from omni_core.testing.tiers import examples
from tests.engine.test_request_ids import companion_plugin
from tests.helpers import CHAIN

IDS = st.one_of(
    st.none(),
    st.text(max_size=6),
    st.sampled_from(["p", "q", "0_p", "1_p", "p-side", "q-side"]),
    st.from_regex(r"\A[0-9]{1,2}_[a-z]{0,2}\Z"),
    st.integers(),
)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=3),
    st.text(max_size=3),
    st.lists(st.one_of(st.text(max_size=2), st.integers()), max_size=2),
    st.dictionaries(st.sampled_from(["vllm", "x"]), st.integers(), max_size=1),
)
FIELDS = st.sampled_from([*SamplingParams.__struct_fields__, "bogus"])
PARAMS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["thinker", "talker", "vocoder", "nope"]),
        st.one_of(st.dictionaries(FIELDS, VALUES, max_size=4), st.integers()),
        max_size=3,
    ),
)
REQUESTS = st.lists(
    st.tuples(IDS, PARAMS, st.one_of(st.none(), st.integers(0, 3))), min_size=1, max_size=4
)


async def call(engine: Any, request_id: Any, params: Any, close_after: int | None) -> Any:
    gen = engine.generate("x", request_id=request_id, sampling_params=params)
    outs = []
    try:
        async for out in gen:
            outs.append(out)
            if close_after is not None and len(outs) > close_after and not out.finished:
                await gen.aclose()  # the caller walks away: the request is aborted
                return "closed"
    except RequestError as exc:
        return exc if not outs else AssertionError(f"RequestError after outputs: {exc}")
    return outs


def test_no_caller_input_breaks_the_engine(fake_entry_points, make_engine):
    fake_entry_points.add("side", companion_plugin())
    engine = make_engine(CHAIN)

    @settings(
        max_examples=examples(60),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(requests=REQUESTS)
    def check(requests):
        async def go():
            return await asyncio.wait_for(
                asyncio.gather(*(call(engine, *r) for r in requests), return_exceptions=True),
                30,
            )

        results = asyncio.run(go())
        for (request_id, params, _), result in zip(requests, results, strict=True):
            if isinstance(result, RequestError) or result == "closed":
                continue
            assert isinstance(result, list), (request_id, params, result)
            finished = [o.finished for o in result]
            assert finished.count(True) == 1 and finished[-1], (request_id, params, result)
        assert engine.is_alive()
        deadline = time.monotonic() + 10  # aborts of closed requests are fire-and-forget
        while engine.request_tables() != {"requests": 0, "runs": 0, "bindings": 0}:
            assert time.monotonic() < deadline, engine.request_tables()
            time.sleep(0.01)

    check()
    assert engine.is_alive()
