"""Worker engines of the stage-process tests (``"factory": "tests.stage.engines:NAME"``; a
stage process imports them with the repository root on its ``PYTHONPATH``)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import time
from typing import Any

from omni_core.stage.dataplane import default_plane


class IdleEngine:
    """Does nothing: no work, no outputs, ``None`` to every RPC."""

    dead = False
    step_delay_s = 0.0

    def add(self, request: Any) -> None:
        pass

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        pass

    def abort(self, request_ids: list[str]) -> None:
        pass

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return None

    def has_work(self) -> bool:
        return False

    def step(self) -> list[Any]:
        return []


def slow_build(config: dict[str, Any]) -> IdleEngine:
    """Writes its pid to ``config["pidfile"]``, then starts slowly (imports, weights)."""
    pathlib.Path(config["pidfile"]).write_text(str(os.getpid()))
    time.sleep(config["sleep"])
    return IdleEngine()


class Putter(IdleEngine):
    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return default_plane().put(bytearray(8)).name  # what a stage hands its engine process


def putter(config: dict[str, Any]) -> Putter:
    return Putter()


def describe(prompt: Any) -> Any:
    """The prompt as :class:`MediaEcho` logs it: a PIL image as (mode, size, sha256 of pixels)."""
    if isinstance(prompt, dict):
        return {key: describe(value) for key, value in prompt.items()}
    if isinstance(prompt, list | tuple):
        return [describe(value) for value in prompt]
    if type(prompt).__module__.startswith("PIL."):
        return [prompt.mode, list(prompt.size), hashlib.sha256(prompt.tobytes()).hexdigest()]
    return prompt


class MediaEcho(IdleEngine):
    """Logs what each frame brought; any RPC answers the log. A request whose prompt is
    ``"sleep"`` keeps it busy for 30 s."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    def add(self, request: Any) -> None:
        if request.prompt == "sleep":  # busy: the frames after this one wait in the socket
            time.sleep(30)
        self.log.append(["add", request.request_id, describe(request.prompt)])

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self.log.append(["input", request_id, describe(prompt)])

    def abort(self, request_ids: list[str]) -> None:
        self.log.extend(["abort", rid, None] for rid in request_ids)

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return list(self.log)


def media_echo(config: dict[str, Any]) -> MediaEcho:
    return MediaEcho()
