"""``omni_core.progress``: an engine's start-up reports each model it builds and each stage
replica it starts (what ``omni run``/``omni serve`` show while a person waits)."""

from __future__ import annotations

from omni_core.models import build_into
from omni_core.plugin.types import ModelSpec
from omni_core.progress import ProgressEvent, report, watch_progress

TWO_STAGES = """name: two
stages:
  - {id: 0, name: a, kind: scripted, final_output: true}
  - {id: 1, name: b, kind: scripted, inputs: [0], replicas: 2, final_output: true}
"""


def test_each_replica_reports_its_start_and_its_end(make_engine):
    events: list[ProgressEvent] = []
    with watch_progress(events.append):
        make_engine(TWO_STAGES)
    seen = [(e.step, e.what, e.done) for e in events]
    for label in (
        "stage 'a' (id 0) replica 0",
        "stage 'b' (id 1) replica 0",
        "stage 'b' (id 1) replica 1",
    ):
        assert ("stage", label, False) in seen and ("stage", label, True) in seen, seen
        assert seen.index(("stage", label, False)) < seen.index(("stage", label, True))
    starting = [e for e in events if not e.done]
    assert all(e.detail == "starting (scripted)" for e in starting)


def test_a_model_build_reports_itself(tmp_path):
    spec = ModelSpec("toy", lambda out: (out / "w.bin").write_bytes(b"1"), "v1")
    events: list[ProgressEvent] = []
    with watch_progress(events.append):
        build_into(spec, tmp_path / "toy-v1")
        build_into(spec, tmp_path / "toy-v1")  # built already: nothing to report
    assert [(e.step, e.what, e.done) for e in events] == [
        ("model", "model toy", False),
        ("model", "model toy", True),
    ]
    assert events[0].detail == f"building in {tmp_path / 'toy-v1'}"


def test_a_failing_listener_does_not_stop_the_others_and_leaves_after_the_block():
    got: list[str] = []

    def broken(event: ProgressEvent) -> None:
        raise RuntimeError("boom")

    with watch_progress(broken), watch_progress(lambda e: got.append(e.what)):
        report("stage", "x")
    report("stage", "y")  # no listener any more
    assert got == ["x"]
