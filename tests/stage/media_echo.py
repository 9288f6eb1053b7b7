"""A process replica's engine for wire tests: it records what each frame brought (a digest of
the pixels of a PIL image in the prompt) and answers the ``seen`` RPC with that log."""

from __future__ import annotations

import hashlib
from typing import Any


def describe(prompt: Any) -> Any:
    """The prompt as the log keeps it: every PIL image as (mode, size, sha256 of its pixels)."""
    if isinstance(prompt, dict):
        return {key: describe(value) for key, value in prompt.items()}
    if isinstance(prompt, list | tuple):
        return [describe(value) for value in prompt]
    if type(prompt).__module__.startswith("PIL."):
        return [prompt.mode, list(prompt.size), hashlib.sha256(prompt.tobytes()).hexdigest()]
    return prompt


class MediaEchoEngine:
    dead = False
    step_delay_s = 0.001

    def __init__(self) -> None:
        self.log: list[Any] = []

    def add(self, request: Any) -> None:
        self.log.append(["add", request.request_id, describe(request.prompt)])

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self.log.append(["input", request_id, describe(prompt)])

    def abort(self, request_ids: list[str]) -> None:
        self.log.extend(["abort", rid, None] for rid in request_ids)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return list(self.log)

    def has_work(self) -> bool:
        return False

    def step(self) -> list[Any]:
        return []


def worker_engine(config: dict[str, Any]) -> MediaEchoEngine:
    return MediaEchoEngine()
