"""``Admissions``: the admission of every request a caller submits (``AddRequest``), whatever the
orchestrator subclass: id checks, live stages, ``n``, the request's seed in every stage
(:func:`seeded`), the companions plugins add
(``omni_admit_request``), registration (``omni_request_admitted``), the deadline, the submit.
:meth:`OrchestratorBase.admit <omni_core.orchestrator.base.OrchestratorBase.admit>` runs it for
every ``AddRequest``, so the hooks always fire. A run a subclass opens itself with ``open_run``
(e.g. a session's later turn) is registered (``omni_request_admitted``) but not admitted again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from omni_core.errors import PluginError, RequestRejected
from omni_core.orchestrator.ids import caller_id_problem, child_id
from omni_core.orchestrator.routing import unavailable
from omni_core.orchestrator.state import ParentState
from omni_core.outputs import ErrorInfo
from omni_core.sampling import SEED_MIN, SamplingParams

if TYPE_CHECKING:
    from omni_core.messages import AddRequest
    from omni_core.orchestrator.context import PartContext
    from omni_core.orchestrator.routing import Router
    from omni_core.orchestrator.state import RunState
    from omni_core.orchestrator.terminals import Terminals


class Admissions:
    """Built from the context; asks ``terminals`` (rejections, deadlines) and ``router`` (the
    submit of admitted runs)."""

    def __init__(self, ctx: PartContext, terminals: Terminals, router: Router) -> None:
        self.pipeline = ctx.pipeline
        self.pools = ctx.pools
        self.graph = ctx.graph
        self.table = ctx.table
        self.hooks = ctx.hooks
        self.port = ctx.port
        self.settings = ctx.settings
        self.terminals = terminals
        self.router = router
        self._ordered: dict[frozenset[int], tuple[int, ...]] = {}

    async def admit(self, msg: AddRequest) -> None:
        """Register a request (children, companions: all or nothing) and submit it; a request
        that cannot be admitted gets one error terminal and leaves no state."""
        rid = msg.request_id
        needed, finals = self.graph.plan(msg.modalities)
        parent = ParentState(rid, msg.stream)
        problem = self.id_problem(rid)
        if problem is not None:
            self._reject(parent, finals, bad_request(problem))
            return
        for sid in self._in_order(needed):
            if not self.pools[sid].has_live():
                self._reject(parent, finals, unavailable(self.pools[sid].stage.name))
                return
        first = self.graph.order[0]
        n = msg.params[first].n
        if n > self.settings.max_n:
            message = f"n={n}: at most {self.settings.max_n} parallel samples (OMNI_MAX_N)"
            self._reject(parent, finals, bad_request(message))
            return
        params = seeded(msg.params, first)
        runs = [
            self.table.new_run(
                rid if n == 1 else child_id(rid, i),
                parent,
                i,
                msg.prompt,
                params if i == 0 else child_params(params, i),
                needed,
                finals,
                msg.source,
            )
            for i in range(n)
        ]
        try:
            companions = [self.companions(run) for run in runs]
        except RequestRejected as exc:  # the plugin's own status and message
            self._reject(parent, finals, ErrorInfo.from_exception(exc))
            return
        except PluginError as exc:
            self._reject(parent, finals, ErrorInfo.from_exception(exc, status_code=400))
            return
        if n > 1 or any(companions):
            problem = self.derived_ids_problem(rid, runs, companions)
            if problem is not None:
                self._reject(parent, finals, bad_request(problem))
                return
        self.table.parents[rid] = parent
        for run, extra in zip(runs, companions, strict=True):
            self.register(run)
            for companion in extra:
                self.register(companion)
        deadline = msg.params[first].deadline_s
        if deadline is not None:
            self.terminals.arm_deadline(parent, deadline)
        start = self.router.start
        for run in runs:
            if run.terminal:
                continue
            await start(run)
            for companion in run.companions:
                if not companion.terminal:
                    await start(companion)

    def _in_order(self, needed: frozenset[int]) -> tuple[int, ...]:
        """``sorted(needed)``, cached (a pipeline has a few plans)."""
        ordered = self._ordered.get(needed)
        if ordered is None:
            ordered = self._ordered[needed] = tuple(sorted(needed))
        return ordered

    def register(self, run: RunState) -> None:
        """Hold a run (fires ``omni_request_admitted``)."""
        self.table.add(run)
        self.hooks.request_admitted(run.run_id, run, self.port)

    def _reject(self, parent: ParentState, finals: tuple[int, ...], error: ErrorInfo) -> None:
        """The one error terminal of a request refused before admission."""
        self.terminals.emit_error(parent, 0, finals[-1], error)

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


def seeded(params: dict[int, SamplingParams], first: int) -> dict[int, SamplingParams]:
    """The request's seed (its first stage's) in every stage whose params carry none, so that
    a seeded request samples reproducibly in every stage (a talker's codes, a vocoder's noise),
    not in its first stage alone; a stage with its own seed keeps it."""
    seed = params[first].seed
    if seed is None:
        return params
    return {
        sid: p if p.seed is not None else msgspec.structs.replace(p, seed=seed)
        for sid, p in params.items()
    }


def child_params(params: dict[int, SamplingParams], index: int) -> dict[int, SamplingParams]:
    """Child ``index``'s params: a seeded stage samples with ``seed + index`` (vLLM's parallel
    sampling), so seeded children differ from each other and reproduce run to run."""
    out = dict(params)
    for sid, p in params.items():
        if p.seed is not None:
            seed = (p.seed + index - SEED_MIN) % 2**64 + SEED_MIN  # stays a signed 64-bit int
            out[sid] = msgspec.structs.replace(p, seed=seed)
    return out
