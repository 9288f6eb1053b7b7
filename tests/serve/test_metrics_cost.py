"""The metrics plugin's per-request bookkeeping is per request: a request ending does not scan
the other in-flight requests' entries (which made n parallel samples quadratic)."""

from __future__ import annotations

from types import SimpleNamespace

from omni_core.outputs import StageOutput
from omni_core.serve.metrics import OmniMetrics


class CountingDict(dict):
    scans = 0

    def __iter__(self):
        CountingDict.scans += 1
        return super().__iter__()


def test_terminal_cleans_its_own_entries_without_scanning_the_others():
    metrics = OmniMetrics()
    no_inputs = SimpleNamespace(inputs=[])
    stages = {
        0: SimpleNamespace(name="thinker", config=no_inputs),
        1: SimpleNamespace(name="talker", config=no_inputs),
    }
    port = SimpleNamespace(pipeline=SimpleNamespace(stages=stages))
    metrics._stages = CountingDict()
    metrics._finished_at = CountingDict()
    ids = [f"{i}_parent" for i in range(500)]
    for rid in ids:
        metrics.omni_request_admitted(rid, port)
        for sid in stages:
            metrics.omni_stage_submitted(rid, sid)
            metrics.omni_stage_output(
                rid, sid, StageOutput(request_id=rid, token_ids=[1], finished=True)
            )
    assert len(metrics._stages) == 1000 and len(metrics._finished_at) == 1000
    CountingDict.scans = 0
    for rid in ids:
        metrics.omni_request_terminal(rid, "stop")
    assert CountingDict.scans == 0
    assert not metrics._stages and not metrics._finished_at
    assert metrics.requests.labels("finished")._value.get() == 500
