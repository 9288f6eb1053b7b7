"""``PartContext``: the one frozen object every orchestrator part is built from.

The orchestrator builds its shared pieces (pipeline, pools, graph, the request table, the
emitter, the task supervisor, the plugin host, the port, the settings) and the seams a subclass
overrides, freezes them into one context and hands it to each part. A part that calls another
part gets it as a constructor argument after the context (the router gets ``terminals`` and
``replicas``); nothing is patched onto a part after it was built.

Every table has one owner, and the other parts ask it:

* ``table`` (:class:`~omni_core.orchestrator.table.RequestTable`) — requests, runs, and the
  replica bindings (which runs a stage replica holds);
* ``pools`` (:class:`~omni_core.stage.pool.StagePool`) — the live clients of each stage;
* ``replicas`` — the reader tasks;
* ``tasks`` — the orchestrator's tasks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.orchestrator.emit import Emitter
    from omni_core.orchestrator.graph import StageGraph
    from omni_core.orchestrator.port import Port
    from omni_core.orchestrator.state import RunState
    from omni_core.orchestrator.table import RequestTable
    from omni_core.orchestrator.tasks import TaskSupervisor
    from omni_core.outputs import ErrorInfo, StageOutput
    from omni_core.plugin.hooks import PluginHost
    from omni_core.stage.pool import StagePool

Intercept = Callable[["RunState", int, "StageOutput"], bool]
Submitted = Callable[["RunState", int, int], None]
ForwardFailure = Callable[["RunState", int, BaseException], Awaitable[bool]]
RunsEnded = Callable[[list[str], str, "ErrorInfo | None"], None]


@dataclass(frozen=True, slots=True)
class Seams:
    """The subclass's seams the parts call (None: not overridden, so no call per event)."""

    intercept: Intercept | None
    submitted: Submitted | None
    forward_failure: ForwardFailure
    runs_ended: RunsEnded | None
    streamed_stages: frozenset[int]  # stages whose deltas are read when not a run's final


@dataclass(frozen=True, slots=True)
class PartContext:
    pipeline: ResolvedPipeline
    pools: dict[int, StagePool]
    graph: StageGraph
    table: RequestTable
    emitter: Emitter
    tasks: TaskSupervisor
    hooks: PluginHost
    port: Port
    settings: Any
    seams: Seams
