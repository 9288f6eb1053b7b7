"""``RequestTable``: the requests and runs the orchestrator holds, by id, and which runs each
stage replica holds (the replica bindings). It is the one owner of these tables: the other parts
ask it (``bind``, ``unbind``, ``evict``), none writes them.

A request (:class:`ParentState`, what the caller asked for) has one or more visible runs (itself,
or its parallel-sampling children) and possibly companions; every run is a :class:`RunState`.
Only the orchestrator loop reads or writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.orchestrator.state import ParentState, RunState, StageRun
from omni_core.outputs import StageResult

if TYPE_CHECKING:
    from omni_core.orchestrator.graph import StageGraph
    from omni_core.request_input import RequestInput
    from omni_core.sampling import SamplingParams


class RequestTable:
    def __init__(self, graph: StageGraph, replicas: dict[int, int] | None = None) -> None:
        self.graph = graph
        self.parents: dict[str, ParentState] = {}
        self.runs: dict[str, RunState] = {}
        # stage id -> replica -> the run ids it holds (sticky: a run's outputs come from there)
        self.bound: dict[int, list[set[str]]] = {
            sid: [set() for _ in range(n)] for sid, n in (replicas or {}).items()
        }

    # --- replica bindings ----------------------------------------------------------------------
    def bind(self, stage_id: int, replica: int, run_id: str) -> None:
        self.bound[stage_id][replica].add(run_id)

    def unbind(self, stage_id: int, replica: int, run_id: str) -> None:
        self.bound[stage_id][replica].discard(run_id)

    def evict(self, stage_id: int, replica: int) -> set[str]:
        """Forget every binding of a replica (it died); returns the run ids it held."""
        slots = self.bound[stage_id]
        held, slots[replica] = slots[replica], set()
        return held

    def bindings(self) -> int:
        """How many (run, replica) bindings are held."""
        return sum(len(held) for slots in self.bound.values() for held in slots)

    def holds(self, run_or_request_id: str) -> bool:
        """Whether an id is in flight, as a request or as any run."""
        return run_or_request_id in self.parents or run_or_request_id in self.runs

    def new_run(
        self,
        run_id: str,
        parent: ParentState,
        index: int,
        prompt: Any,
        params: dict[int, SamplingParams],
        needed: frozenset[int],
        finals: tuple[int, ...],
        source: RequestInput | None = None,
    ) -> RunState:
        """A run through ``needed`` (not registered yet); ``source``: what the caller sent
        (None: the prompt is the caller's own)."""
        names = self.graph.stage_names
        stages = {
            sid: StageRun(StageResult(stage_id=sid, stage_name=names[sid]))
            for sid in self.graph.order
            if sid in needed
        }
        run = RunState(run_id, parent, index, prompt, params, needed, finals, stages)
        if source is not None:
            run.source = source
        return run

    def add(self, run: RunState) -> None:
        self.runs[run.run_id] = run
        if run.visible:
            run.parent.live.add(run.run_id)

    def release(self, run: RunState) -> None:
        """A terminal run (already out of ``runs``) leaves its request; the request goes with its
        last visible run."""
        parent = run.parent
        if run.visible:
            parent.live.discard(run.run_id)
            if not parent.live:
                if self.parents.get(parent.request_id) is parent:
                    del self.parents[parent.request_id]
                if parent.deadline is not None:
                    parent.deadline.cancel()

    def collect(self, run: RunState, into: dict[str, RunState]) -> None:
        """``run`` and its live companions into ``into``."""
        into[run.run_id] = run
        for companion in run.companions:
            if not companion.terminal:
                into[companion.run_id] = companion

    def resolve(self, ids: list[str]) -> dict[str, RunState]:
        """The runs (companions included) that request ids, run ids or companion ids name."""
        runs: dict[str, RunState] = {}
        for rid in ids:
            parent = self.parents.get(rid)
            if parent is not None:
                for run_id in sorted(parent.live):
                    self.collect(self.runs[run_id], runs)
            elif rid in self.runs:
                self.collect(self.runs[rid], runs)
        return runs
