"""Fuzzing structured-output specs through ``omni serve`` on the tiny thinker (one vLLM stage):
every ``choice`` list, regex, JSON schema (``$ref`` cycles, impossible bounds, enums, nesting)
as ``structured_outputs``, ``response_format`` or a named tool's parameters either answers 200
with a real finish reason (never ``"error"``) or is one 400 naming the request's field; no
request adds more than ``GROWTH`` to the stage process's peak RSS (``VmHWM``, reset through
``/proc/<pid>/clear_refs`` before each); the stage serves on after each."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_core.testing.tiers import examples
from tests.kinds.openai_helpers import MODEL, PIPE
from tests.serve.conftest import running_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

GROWTH = 96 << 20  # bytes one request may add to the stage's peak RSS (within the bounds)
EXAMPLES = int(os.environ.get("OMNI_GRAMMAR_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
STATS: dict[str, int] = {"200": 0, "400": 0, "max_growth": 0, "total_growth": 0}

words = st.text(st.sampled_from('ab01 -"\\{}|*'), min_size=0, max_size=6)
regexes = st.lists(
    st.sampled_from(["a", "b", "[0-9]", "(a|b)", "x*", "(ab)+", "\\d{2}", ".", "(", ")", "?"]),
    min_size=1,
    max_size=8,
).map("".join)
leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "null"},
        {"$ref": "#"},
        {"type": "string", "minLength": 5, "maxLength": 2},
        {"type": "integer", "minimum": 3, "maximum": 1},
        {"type": "string", "pattern": "^a+$"},
        {"enum": []},
        {"const": "x"},
        {"type": "object", "additionalProperties": False},
    ]
) | st.builds(lambda v: {"enum": v}, st.lists(words, max_size=4))
schemas = st.recursive(
    leaf,
    lambda inner: (
        st.builds(
            lambda props, req: {
                "type": "object",
                "properties": props,
                "required": [k for k in props if req],
            },
            st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
            st.booleans(),
        )
        | st.builds(lambda items: {"type": "array", "items": items}, inner)
        | st.builds(lambda alts: {"anyOf": alts}, st.lists(inner, max_size=3))
        | st.builds(
            lambda sub: {"$defs": {"d": sub}, "$ref": "#/$defs/d"},
            inner,
        )
    ),
    max_leaves=6,
)


@st.composite
def requests(draw: Any) -> tuple[dict[str, Any], str]:
    """A chat body's structured-output fields and the field a 400 must name."""
    where = draw(st.sampled_from(["choice", "regex", "json", "response_format", "tool"]))
    if where == "choice":
        return {"structured_outputs": {"choice": draw(st.lists(words, max_size=8))}}, (
            "structured_outputs.choice"
        )
    if where == "regex":
        return {"structured_outputs": {"regex": draw(regexes)}}, "structured_outputs.regex"
    schema = draw(schemas)
    if where == "json":
        return {"structured_outputs": {"json": schema}}, "structured_outputs.json"
    if where == "response_format":
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {"response_format": fmt}, "response_format.json_schema"
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    named = {"type": "function", "function": {"name": "f"}}
    return {"tools": [tool], "tool_choice": named}, "tools[0].function.parameters"


def children() -> list[int]:
    """This process's descendants (the stage processes), from ``/proc/*/stat``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], list(parents.get(os.getpid(), ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) * 1024 if found else 0


@pytest.fixture(scope="module", autouse=True)
def report():
    """``OMNI_GRAMMAR_FUZZ_REPORT=FILE``: the run's figures (docs/security.md)."""
    yield
    target = os.environ.get("OMNI_GRAMMAR_FUZZ_REPORT")
    if target:
        Path(target).write_text(json.dumps({"growth_bound_bytes": GROWTH, **STATS}, indent=2))


@pytest.fixture(scope="module")
def server():
    with running_server(PIPE) as (base, _, _):
        pids = [p for p in children() if status(p, "VmRSS") > 100 << 20]  # the vLLM stage
        assert pids, "no stage process found"
        yield base, pids


@FUZZ
@given(case=requests())
def test_each_spec_answers_or_is_one_400_naming_its_field(server, case):
    base, pids = server
    fields, param = case
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := the current RSS
    before = {pid: status(pid, "VmRSS") for pid in pids}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    response = httpx.post(f"{base}/v1/chat/completions", json={**body, **fields}, timeout=120)
    growth = max(status(pid, "VmHWM") - before[pid] for pid in pids)
    STATS["max_growth"] = max(STATS["max_growth"], growth)
    STATS["total_growth"] += growth
    assert growth <= GROWTH, f"one request added {growth >> 20} MiB to the stage"
    assert response.status_code in (200, 400), response.text
    STATS[str(response.status_code)] += 1
    if response.status_code == 400:
        error = response.json()["error"]
        assert error["message"].startswith(f"'{param}"), error
        # a tool's parameters that are no JSON schema at all: the tools' own check names 'tools'
        assert error["param"] in (param, param.split("[")[0]), error
    else:
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] in ("stop", "length", "tool_calls"), choice
    alive = httpx.post(f"{base}/v1/chat/completions", json={**body, "max_tokens": 2}, timeout=120)
    assert alive.status_code == 200
