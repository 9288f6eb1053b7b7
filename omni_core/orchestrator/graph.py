"""``StageGraph``: a pipeline's stages as a graph: order, edges, and the stages a request needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni_core.config.pipeline import InputEdge
    from omni_core.config.resolve import ResolvedPipeline

Plan = tuple[frozenset[int], tuple[int, ...]]  # (stages needed, final stages in stage order)


class StageGraph:
    """Read-only after construction; built once per orchestrator."""

    def __init__(self, pipeline: ResolvedPipeline) -> None:
        config = pipeline.config
        self.pipeline = pipeline
        self.order = [s.id for s in config.topological_order()]
        self.downstream: dict[int, list[tuple[int, InputEdge]]] = {sid: [] for sid in self.order}
        self.inputs: dict[int, list[InputEdge]] = {s.id: list(s.inputs) for s in config.stages}
        self.fan_in = {sid: tuple(e.stage for e in edges) for sid, edges in self.inputs.items()}
        for stage in config.stages:
            for edge in stage.inputs:
                self.downstream[edge.stage].append((stage.id, edge))
        self.stream_sources = frozenset(
            e.stage for s in config.stages for e in s.inputs if e.mode == "stream"
        )
        self.stage_names = {sid: st.name for sid, st in pipeline.stages.items()}
        self.stage_info = {
            sid: (st.name, st.config.final_output_type) for sid, st in pipeline.stages.items()
        }
        self._plans: dict[tuple[str, ...] | None, Plan] = {}

    def plan(self, modalities: list[str] | None) -> Plan:
        """(stages needed, final stages in order) for the wanted output modalities."""
        key = tuple(sorted(modalities)) if modalities else None
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        stages = self.pipeline.stages
        finals = [s for s in self.order if stages[s].config.final_output]
        if modalities:
            finals = [s for s in finals if stages[s].config.final_output_type in modalities]
        plan = (self.feeding(finals), tuple(finals))
        self._plans[key] = plan
        return plan

    def plan_until(self, stage_id: int) -> Plan:
        """(stages needed, final stages) of a run that ends at ``stage_id``."""
        return self.feeding([stage_id]), (stage_id,)

    def feeding(self, stage_ids: list[int]) -> frozenset[int]:
        """The given stages and every stage that feeds them."""
        needed: set[int] = set()
        todo = list(stage_ids)
        while todo:
            sid = todo.pop()
            if sid not in needed:
                needed.add(sid)
                todo.extend(e.stage for e in self.inputs[sid])
        return frozenset(needed)
