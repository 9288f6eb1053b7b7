"""``Admissions``: what admitting a request needs besides the tables — id checks and the
companions plugins add (``omni_admit_request``, fired here for every request a caller submits,
whatever the orchestrator subclass; a run a subclass opens itself with ``open_run`` (e.g. a
session's later turn) is not admitted again."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from omni_core.errors import PluginError
from omni_core.orchestrator.ids import caller_id_problem
from omni_core.outputs import ErrorInfo
from omni_core.sampling import SEED_MIN, SamplingParams

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.orchestrator.graph import StageGraph
    from omni_core.orchestrator.port import Port
    from omni_core.orchestrator.state import RunState
    from omni_core.orchestrator.table import RequestTable
    from omni_core.plugin.hooks import PluginHost


class Admissions:
    def __init__(
        self,
        *,
        pipeline: ResolvedPipeline,
        graph: StageGraph,
        table: RequestTable,
        hooks: PluginHost,
        port: Port,
    ) -> None:
        self.pipeline = pipeline
        self.graph = graph
        self.table = table
        self.hooks = hooks
        self.port = port

    def id_problem(self, rid: str) -> str | None:
        """Why a caller's id cannot be admitted: in flight as a request or as any run (a child,
        a companion), or not a caller's id (the engine refuses those before; this keeps the
        tables sound for any caller of the orchestrator)."""
        if self.table.holds(rid):
            return f"request id '{rid}' is already in flight"
        return caller_id_problem(rid)

    def derived_ids_problem(
        self, rid: str, runs: list[RunState], companions: list[list[RunState]]
    ) -> str | None:
        """Why the ids derived for a request (children, companions) cannot be registered: one is
        an in-flight request's or run's id, or two of them are the same."""
        ids = [run.run_id for run in runs]
        ids.extend(c.run_id for extra in companions for c in extra)
        seen: set[str] = set()
        for run_id in ids:
            if run_id in seen or self.table.holds(run_id):
                return (
                    f"request id '{rid}': its internal run id '{run_id}' is already in flight "
                    "(choose another request id)"
                )
            seen.add(run_id)
        return None

    def companions(self, run: RunState) -> list[RunState]:
        """The companions the plugins admit with ``run`` (tags merged into ``run.tags``); raises
        RequestRejected or PluginError (nothing admitted)."""
        if not self.hooks.has_admission:
            return []
        made: list[RunState] = []
        for admission in self.hooks.admit_request(
            request_id=run.run_id,
            request=run,
            prompt=run.prompt,
            pipeline=self.pipeline.config,
            params=run.params,
            port=self.port,
        ):
            run.tags.update(admission.tags)
            for spec in admission.companions:
                params = dict(run.params)
                if isinstance(spec.sampling_params, dict):
                    params.update(spec.sampling_params)
                elif spec.sampling_params is not None:
                    params = {sid: spec.sampling_params for sid in params}
                needed, finals = run.needed, run.finals
                if spec.final_stage is not None:
                    if spec.final_stage not in run.needed:
                        raise PluginError(
                            f"companion '{spec.suffix}': final_stage {spec.final_stage} is not "
                            "a stage of this request"
                        )
                    needed, finals = self.graph.plan_until(spec.final_stage)
                companion = self.table.new_run(
                    run.run_id + spec.suffix,
                    run.parent,
                    run.index,
                    spec.prompt,
                    params,
                    needed,
                    finals,
                )
                companion.companion_of = run
                companion.tags.update(spec.metadata)
                made.append(companion)
        if made:
            run.companions = made
        return made


def bad_request(message: str) -> ErrorInfo:
    return ErrorInfo(type="RequestError", message=message, status_code=400)


def child_params(params: dict[int, SamplingParams], index: int) -> dict[int, SamplingParams]:
    """Child ``index``'s params: a seeded stage samples with ``seed + index`` (vLLM's parallel
    sampling), so seeded children differ from each other and reproduce run to run."""
    out = dict(params)
    for sid, p in params.items():
        if p.seed is not None:
            seed = (p.seed + index - SEED_MIN) % 2**64 + SEED_MIN  # stays a signed 64-bit int
            out[sid] = msgspec.structs.replace(p, seed=seed)
    return out
