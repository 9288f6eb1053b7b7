"""The Ray actor behind one stage replica (``runtime: ray``); imported only inside Ray.

Two ways to host a replica:

* ``worker``: the stage's :class:`~omni_core.stage.worker.WorkerEngine` (what a process replica
  runs: ``vllm``, ``vocoder``, ``torch``, ``scripted``, plugin kinds with process clients),
  built and called on one dedicated thread, stepped while it has work.
* ``client``: any other kind (``python``, in-process plugin kinds): the kind's own client,
  built by its ``client_factory`` inside the actor, on the actor's event loop.

Outputs wait in an outbox; ``get_outputs`` blocks until there is at least one and takes them all
(the driver keeps one such call outstanding per replica: no polling). A worker engine that marks
itself ``dead`` ends the actor process, as a process replica's worker exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from omni_core.errors import EngineDeadError

logger = logging.getLogger(__name__)

DEATH_CODE = 17


class StageActor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.outbox: list[Any] = []
        self.ready: asyncio.Event | None = None
        self.work: asyncio.Event | None = None
        self.driver: asyncio.Task[None] | None = None
        self.engine: Any = None
        self.client: Any = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="omni-stage-engine")
        if spec["mode"] == "worker":  # built on the engine thread: every engine call runs there
            from omni_core.stage.worker import build

            self.building = self.pool.submit(build, spec["config"])

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def start(self) -> dict[str, Any]:
        """Finish building the engine (errors surface here) and start stepping it."""
        import ray

        self.ready, self.work = asyncio.Event(), asyncio.Event()
        if self.spec["mode"] == "worker":
            self.engine = await asyncio.wrap_future(self.building)
            self.driver = asyncio.get_running_loop().create_task(self._drive())
        else:
            self.client = self.spec["factory"](*self.spec["args"])
            await self.client.start()
        return {"pid": os.getpid(), "node_ip": ray.util.get_node_ip_address()}

    # --- worker mode ------------------------------------------------------------------------
    async def _drive(self) -> None:
        assert self.work is not None and self.ready is not None
        engine = self.engine
        while True:
            await self.work.wait()
            self.work.clear()
            while await self._run(engine.has_work):
                outs = await self._run(engine.step)
                if outs:
                    self.outbox.extend(outs)
                    self.ready.set()
                if engine.dead:
                    logger.error("stage engine marked itself dead: ending the actor")
                    os._exit(DEATH_CODE)  # the replica dies abruptly, as a process worker
                await asyncio.sleep(engine.step_delay_s)

    def _kick(self) -> None:
        if self.work is not None:
            self.work.set()

    async def add(self, request: Any) -> None:
        if self.client is not None:
            await self.client.add_request(request)
            return
        await self._run(self.engine.add, request)
        self._kick()

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        if self.client is not None:
            await self.client.add_input(request_id, prompt, final)
            return
        await self._run(self.engine.add_input, request_id, prompt, final)
        self._kick()

    async def abort(self, request_ids: list[str]) -> None:
        if self.client is not None:
            await self.client.abort(request_ids)
            return
        await self._run(self.engine.abort, request_ids)
        self._kick()

    async def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.client is not None:
            return await self.client.collective_rpc(method, args, kwargs)
        value = await self._run(self.engine.rpc, method, args, kwargs)
        if self.engine.dead:  # answer first, then die (as the process worker does)
            asyncio.get_running_loop().call_later(0.05, os._exit, DEATH_CODE)
        self._kick()
        return value

    async def get_outputs(self) -> list[Any]:
        if self.client is not None:
            return list(await self.client.get_outputs())
        assert self.ready is not None
        while not self.outbox:
            self.ready.clear()
            await self.ready.wait()
        batch, self.outbox = self.outbox, []
        return batch

    async def healthy(self) -> bool:
        if self.client is not None:
            return bool(self.client.is_healthy())
        return not self.engine.dead

    async def stop(self) -> None:
        """Release the engine before the actor is killed (best effort)."""
        if self.driver is not None:
            self.driver.cancel()
        if self.client is not None:
            try:
                await self.client.shutdown()
            except EngineDeadError:
                pass
        self.engine = None
        self.pool.shutdown(wait=False, cancel_futures=True)
