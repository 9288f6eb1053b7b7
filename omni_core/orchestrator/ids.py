"""Ids the orchestrator derives from a caller's request id, and the namespace they reserve.

A parallel-sampling child of request ``rid`` runs as ``"{i}_{rid}"`` (vLLM's convention). Caller
ids of that form (``<digits>_...``) are refused, so a child id can never be a caller's id, and
two requests' children never share an id: ``"{i}_{rid}"`` splits back into ``i`` and ``rid`` in
one way only, since ``rid`` itself does not start with ``<digits>_``. Caller ids hold no control
characters either: stages may build their own internal ids from a run id and one of them (the
vLLM kind uses NUL) without meeting a caller's id.
"""

from __future__ import annotations

import re
from typing import Any

_DERIVED = re.compile(r"[0-9]+_")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def child_id(request_id: str, index: int) -> str:
    """The id of parallel-sampling child ``index`` of ``request_id``."""
    return f"{index}_{request_id}"


def is_derived_id(request_id: str) -> bool:
    """True for ids in the children's namespace (``<digits>_...``), which callers may not use."""
    return _DERIVED.match(request_id) is not None


def caller_id_problem(request_id: Any) -> str | None:
    """Why ``request_id`` cannot be a caller's request id (None: it can)."""
    if not isinstance(request_id, str) or not request_id:
        return "request_id must be a non-empty string"
    if _CONTROL.search(request_id) is not None:
        return f"request id {request_id!r} contains control characters"
    if is_derived_id(request_id):
        return (
            f"request id '{request_id}' is reserved: ids '<digits>_...' name the "
            "parallel-sampling children of other requests"
        )
    return None
