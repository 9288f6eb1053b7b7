"""Helpers of the omni-qwen3-tts tests: a stage request and draining an engine in-process."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def request(rid: str, text: Any, *, temperature: float = 0.0, seed: int | None = None,
            max_tokens: int = 23, stream: bool = False, **extra: Any) -> Any:  # fmt: skip
    """A ``StageRequest``-shaped object for an engine driven in-process."""
    from omni_core import SamplingParams

    params = SamplingParams(
        temperature=temperature, top_k=50, top_p=1.0, repetition_penalty=1.05, seed=seed,
        max_tokens=max_tokens, extra=extra,
    )  # fmt: skip
    return SimpleNamespace(
        request_id=rid, prompt=text, params=params, stream_outputs=stream, streaming_input=False
    )


def drain(engine: Any) -> dict[str, Any]:
    """Step ``engine`` until idle: each request's codes and finish reason."""
    codes: dict[str, list[int]] = {}
    done: dict[str, Any] = {}
    while engine.has_work():
        for out in engine.step():
            codes.setdefault(out.request_id, []).extend(out.token_ids)
            if out.finished:
                done[out.request_id] = (codes[out.request_id], out.finish_reason, out.error)
    return done
