"""``Orchestrator``: the turn-based orchestrator (one prompt in, streamed outputs out).

The base owns the request protocol now (:meth:`OrchestratorBase.admit
<omni_core.orchestrator.base.OrchestratorBase.admit>` admits every ``AddRequest`` and fires the
admission hooks whatever the subclass): this class is the base as it is, kept as the name engine
kinds build.
"""

from __future__ import annotations

from omni_core.orchestrator.admission import child_params
from omni_core.orchestrator.base import OrchestratorBase

__all__ = ["Orchestrator", "child_params"]


class Orchestrator(OrchestratorBase):
    """The base orchestrator: admits ``AddRequest``s (children, companions, a deadline)."""
