"""Request-scoped errors keep their class: ``ErrorInfo.is_a`` and the status a class implies."""

from __future__ import annotations

import httpx
import pytest

from omni_core import ErrorInfo, ReplicaDeadError, RequestError, StageUnavailableError
from tests.helpers import collect


class ModelSwappedOut(StageUnavailableError):
    """A stage's own kind of unavailability (a name no list in omni-core knows)."""


def swapped_out(prompt, params):
    raise ModelSwappedOut("the model is being swapped; retry")


SWAPPING = """
name: swapping
stages:
  - {id: 0, name: s, kind: python, engine_args: {callable: "tests.engine.test_error_types:swapped_out"}, final_output: true}
"""


def test_error_info_keeps_the_class_hierarchy_and_the_class_status():
    dead = ErrorInfo.from_exception(ReplicaDeadError("replica 0 died"))
    assert dead.type == "ReplicaDeadError" and dead.status_code == 503 and dead.retryable
    assert dead.is_a(ReplicaDeadError) and dead.is_a(StageUnavailableError)
    assert not dead.is_a(RequestError)
    bad = ErrorInfo.from_exception(RequestError("too large", status_code=413))
    assert bad.status_code == 413 and not bad.retryable and bad.is_a(ValueError)
    assert not bad.is_a(StageUnavailableError)
    # an explicit status wins over the class's
    assert ErrorInfo.from_exception(ModelSwappedOut("x"), status_code=500).status_code == 500
    plain = ErrorInfo.from_exception(RuntimeError("boom"))
    assert (plain.status_code, plain.retryable, plain.classes) == (500, False, ("RuntimeError",))


async def test_a_stage_raising_a_stage_unavailable_subclass_is_a_retryable_503(make_engine):
    engine = make_engine(SWAPPING)
    [out] = await collect(engine, "x")
    assert out.finished and out.finish_reason == "error"
    assert out.error.type == "ModelSwappedOut" and out.error.is_a(StageUnavailableError)
    assert out.error.status_code == 503 and out.error.retryable


def test_http_maps_stage_unavailable_by_class_not_by_name():
    pytest.importorskip("fastapi")
    from omni_core.testing.server import running_server

    with running_server(SWAPPING) as (base, _, _):
        r = httpx.post(f"{base}/v1/completions", json={"model": "swapping", "prompt": "x"})
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "service_unavailable"
    assert r.json()["error"]["code"] == "ModelSwappedOut"


async def test_replica_death_and_no_live_replica_match_stage_unavailable(make_engine):
    engine = make_engine("""
name: dies
stages:
  - {id: 0, name: s, kind: scripted, engine_args: {num_tokens: 5, die_after: 2}, final_output: true}
""")
    [*_, dead] = await collect(engine, "a")
    assert dead.error.is_a(ReplicaDeadError) and dead.error.is_a(StageUnavailableError)
    [late] = await collect(engine, "b")
    assert late.error.type == "StageUnavailableError" and late.error.is_a(StageUnavailableError)
    assert not late.error.is_a(ReplicaDeadError)
    assert (late.error.status_code, late.error.retryable) == (503, True)
