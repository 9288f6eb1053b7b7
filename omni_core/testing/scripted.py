"""``scripted`` stage clients: in-process (an asyncio driver) or one OS process per replica.

The process mode (``process: true``) runs the same engine through
:mod:`omni_core.stage.process`, for tests of process death and orphans.
"""

from __future__ import annotations

import asyncio
from typing import Any

from omni_core.errors import StartupError
from omni_core.stage.client import StageContext, StageRequest
from omni_core.stage.local import LocalStageClient
from omni_core.stage.process import ProcessStageClient
from omni_core.testing.scripted_core import ScriptedArgs, ScriptedCore


class ScriptedStageClient(LocalStageClient):
    """In-process replica: steps only after the orchestrator took the previous batch."""

    def __init__(self, label: str, stage_name: str, args: ScriptedArgs, replica: int = 0) -> None:
        super().__init__(label)
        self.core = ScriptedCore(stage_name, args, replica)
        self._args = args
        self._work: asyncio.Event | None = None
        self._driver: asyncio.Task[None] | None = None

    def worker_spec(self) -> dict[str, Any]:
        """The same engine as a worker engine (how the ``ray`` runtime hosts this replica)."""
        config = {
            "factory": "omni_core.testing.scripted_core:worker_engine",
            "stage_name": self.core.name,
            "args": self._args.model_dump(),
            "replica": self.core.replica,
        }
        return {"config": config, "env": {}, "start_timeout_s": 60.0, "preload": []}

    async def start(self) -> None:
        if self._args.start_delay_s:
            await asyncio.sleep(self._args.start_delay_s)  # a slow model load
        if self._args.start_fails:
            raise StartupError(f"{self.label}: start_fails is set")
        await super().start()
        self._work = asyncio.Event()
        self._driver = asyncio.get_running_loop().create_task(self._drive())

    async def _drive(self) -> None:
        assert self._work is not None
        while True:
            await self._work.wait()
            self._work.clear()
            if self._outbox or not self.core.has_work():
                continue
            if self._args.delay_s:
                await asyncio.sleep(self._args.delay_s)
            for out in self.core.step():
                self.emit(out)
            if self.core.dead:
                self.die(f"die_after={self._args.die_after} reached")
                return
            if not self._outbox and self.core.has_work():
                self._work.set()  # whole-output steps emit nothing: keep stepping

    def on_taken(self) -> None:
        if self._work is not None:
            self._work.set()

    async def add_request(self, request: StageRequest) -> None:
        self.check_alive()
        self.core.add_request(request)
        self.on_taken()

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self.check_alive()
        self.core.add_input(request_id, prompt, final)
        self.on_taken()

    async def abort(self, request_ids: list[str]) -> None:
        self.check_alive()
        self.core.abort(request_ids)
        self.on_taken()

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self.check_alive()
        result = self.core.rpc(method, args, kwargs)
        if self.core.dead:
            self.die(f"killed by RPC '{method}'")
        self.on_taken()
        return result

    async def shutdown(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
        await super().shutdown()


class ScriptedProcessClient(ProcessStageClient):
    """One replica in its own OS process (``process: true``)."""

    def __init__(self, label: str, stage_name: str, args: ScriptedArgs, replica: int = 0) -> None:
        super().__init__(
            label,
            {
                "factory": "omni_core.testing.scripted_core:worker_engine",
                "stage_name": stage_name,
                "args": args.model_dump(),
                "replica": replica,
            },
        )
        self._args = args

    async def start(self) -> None:
        if self._args.start_delay_s:
            await asyncio.sleep(self._args.start_delay_s)
        if self._args.start_fails:
            raise StartupError(f"{self.label}: start_fails is set")
        await super().start()


def make_scripted_client(stage: Any, replica: int, context: StageContext) -> LocalStageClient:
    args = ScriptedArgs.model_validate(stage.engine_args)
    label = f"stage '{stage.name}' replica {replica}"
    if args.process:
        return ScriptedProcessClient(label, stage.name, args, replica)
    return ScriptedStageClient(label, stage.name, args, replica)
