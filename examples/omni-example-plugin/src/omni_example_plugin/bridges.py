"""The ``dedupe`` bridge: upstream token ids with runs of repeated ids collapsed."""

from __future__ import annotations

from typing import Any

from omni_core import StageResult


def dedupe(sources: list[StageResult], original_prompt: Any, params: Any) -> list[int] | None:
    """Concatenate the upstream token ids (in ``inputs`` order), dropping immediate repeats.

    ``[7, 7, 6, 5, 5]`` becomes ``[7, 6, 5]``. Returns ``None`` when upstream produced no token
    ids: the stage is then skipped (an empty terminal if it is a final stage).
    """
    out: list[int] = []
    for source in sources:
        for token in source.token_ids:
            if not out or out[-1] != token:
                out.append(token)
    return out or None
