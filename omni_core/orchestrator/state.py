"""Request state owned by the orchestrator loop (never touched from another thread).

Hooks see a run through :class:`omni_core.views.RequestView` and a stage run through
:class:`omni_core.views.StageState`; these classes satisfy them as they are (no copy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from omni_core.outputs import StageResult
from omni_core.request_input import RequestInput, prompt_input
from omni_core.sampling import SamplingParams


class StageRun(msgspec.Struct, gc=False):
    """One request in one stage. Not tracked by the cyclic GC: it holds no cycle, and three of
    them per request would otherwise be promoted and rescanned by every full collection."""

    result: StageResult
    replica: int | None = None
    submitted: bool = False
    finished: bool = False
    aborted: bool = False  # the physical abort succeeded (a retry skips it)
    deferred: bool = False
    stream_buffer: StageResult | None = None  # upstream outputs not yet sent (stream edge)
    stream_count: int = 0
    t_submit: float = 0.0  # time.monotonic() of the submit, first output, finish
    t_first: float = 0.0
    t_finish: float = 0.0


@dataclass(slots=True)
class ParentState:
    """What the caller asked for: one request id, one stream, one terminal."""

    request_id: str
    stream: Any
    live: set[str] = field(default_factory=set)
    deadline: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class RunState:
    """One pipeline run: the request itself, a parallel-sampling child, or a companion."""

    run_id: str
    parent: ParentState
    index: int
    prompt: Any
    params: dict[int, SamplingParams]
    needed: frozenset[int]
    finals: tuple[int, ...]
    stages: dict[int, StageRun]
    companion_of: RunState | None = None
    companions: Sequence[RunState] = ()  # a tuple until a plugin adds some
    finished_finals: set[int] = field(default_factory=set)
    terminal: bool = False
    tags: dict[str, Any] = field(default_factory=dict)
    stream_gates: dict[int, Any] | None = None  # stage id -> the gates' Verdict its chunks take
    source: RequestInput | None = None  # what the caller sent, where it is not ``prompt`` itself

    @property
    def request_id(self) -> str:
        """The caller's request id (its parent's)."""
        return self.parent.request_id

    @property
    def visible(self) -> bool:
        return self.companion_of is None

    def _input(self) -> RequestInput:
        if self.source is None:
            self.source = prompt_input(self.prompt)
        return self.source

    @property
    def messages(self) -> tuple[dict[str, Any], ...] | None:
        return self._input().messages

    @property
    def parts(self) -> tuple[dict[str, Any], ...]:
        return self._input().parts

    @property
    def text(self) -> str:
        return self._input().text
