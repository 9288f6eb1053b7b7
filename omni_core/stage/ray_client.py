"""``RayStageClient``: one stage replica hosted by a Ray actor, behind the StageClient protocol.

Each call is an awaited actor method (``await actor.method.remote()`` on the orchestrator loop);
``get_outputs`` is one outstanding call that returns when the actor has outputs. A dead actor
(killed, its node lost, its engine gone) makes every call raise
:class:`~omni_core.errors.EngineDeadError`, so the orchestrator's isolation and restart rules
apply unchanged; Ray never restarts it (``max_restarts=0``).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

from omni_core.errors import EngineDeadError, StartupError
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageRequest
from omni_core.stage.dataplane import RayDataPlane, materialize
from omni_core.stage.ray_placement import NOT_PLACED, state_address, why_unplaced

logger = logging.getLogger(__name__)

_ACTOR_CLASS: Any = None
PLACE_POLL_S = 0.25  # how often a pending actor's placement is checked


def actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        from omni_core.stage.ray_actor import StageActor

        _ACTOR_CLASS = ray.remote(StageActor)
    return _ACTOR_CLASS


class RayStageClient:
    def __init__(
        self,
        label: str,
        spec: dict[str, Any],
        options: dict[str, Any],
        start_timeout_s: float = 600.0,
        preload: tuple[str, ...] = (),
        place_timeout_s: float | None = None,
        placing: tuple[str, dict[str, float]] = ("", {}),
    ) -> None:
        self.label = label
        self.spec = spec
        self.options = options
        self.start_timeout_s = start_timeout_s
        self.preload = preload
        self.place_timeout_s = place_timeout_s  # None: no bound of its own (start_timeout_s)
        self.placing = placing  # (stage name, demand per replica): why it could not be placed
        self.actor: Any = None
        self.actor_id: str | None = None
        self.info: dict[str, Any] = {}
        self._dead: str | None = None
        self._closed = False
        self._plane = RayDataPlane()

    async def start(self) -> None:
        self.actor = actor_class().options(**self.options).remote(self.spec)
        self.actor_id = self.actor._actor_id.hex()
        for module in self.preload:  # payload types, imported while the actor starts
            await asyncio.to_thread(importlib.import_module, module)
        await self._placed()
        try:
            self.info = await asyncio.wait_for(
                self._call("start", starting=True), self.start_timeout_s
            )
        except (EngineDeadError, RuntimeError, TimeoutError) as exc:
            self.kill()
            raise StartupError(f"{self.label}: Ray actor failed to start: {exc}") from exc

    async def _placed(self) -> None:
        """Wait until Ray placed the actor on a node (a worker leased for it, or the actor
        ready), at most ``place_timeout_s``; past it, kill the pending actor and raise a
        :class:`StartupError` saying what is missing. Placement is bounded apart from start-up:
        a model load may take long, waiting for a node that cannot come must not."""
        if self.place_timeout_s is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.place_timeout_s
        ready = asyncio.ensure_future(self.actor.__ray_ready__.remote())
        try:
            while not ready.done():
                if await asyncio.to_thread(_leased, self.actor_id):
                    return
                if loop.time() >= deadline:
                    break
                await asyncio.wait({ready}, timeout=PLACE_POLL_S)
            else:
                return  # created (or died: start() reports why)
        finally:
            if not ready.done():
                ready.cancel()
            elif not ready.cancelled():
                ready.exception()  # retrieved: start() reports a dead actor
        stage, need = self.placing
        reason = await asyncio.to_thread(why_unplaced, stage, need)
        self.kill()
        raise StartupError(
            f"{NOT_PLACED} within {self.place_timeout_s:.1f} s "
            f"(bounded by OMNI_STARTUP_TIMEOUT_S): {reason}"
        )

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"{self.label} is dead: {self._dead}")
        if self._closed:
            raise EngineDeadError(f"{self.label} is shut down")

    async def _call(self, method: str, *args: Any, starting: bool = False) -> Any:
        from ray.exceptions import RayActorError, RayTaskError

        self._check_alive()
        try:
            return await getattr(self.actor, method).remote(*args)
        except RayActorError as exc:
            detail = str(exc).strip()[-800:] if starting else _first_line(exc)
            reason = "shut down" if self._closed else f"Ray actor died: {detail}"
            if not starting:
                self._dead = self._dead or reason
            raise EngineDeadError(f"{self.label} is dead: {reason}") from None
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, EngineDeadError):
                self._dead = self._dead or str(cause)
                raise EngineDeadError(str(cause)) from None
            if isinstance(cause, NotImplementedError):
                raise NotImplementedError(str(cause)) from None
            raise RuntimeError(f"{type(cause).__name__}: {cause}") from None

    async def add_request(self, request: StageRequest) -> None:
        await self._call("add", request)

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        await self._call("add_input", request_id, prompt, final)

    async def abort(self, request_ids: list[str]) -> None:
        await self._call("abort", request_ids)

    async def collective_rpc(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return await self._call("rpc", method, tuple(args), kwargs)

    async def get_outputs(self) -> list[StageOutput]:
        batch: list[StageOutput] = await self._call("get_outputs")
        for out in batch:
            if out.payload is not None:  # arrays come from the object store, not the call
                out.payload = materialize(out.payload, self._plane)
            if out.hidden_states is not None:
                materialize(out.hidden_states, self._plane)
        return batch

    def is_healthy(self) -> bool:
        return self._dead is None and not self._closed

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.actor is None:
            return
        if self._dead is None:
            try:
                await asyncio.wait_for(self.actor.stop.remote(), 5.0)
            except Exception as exc:  # a dead or stuck actor: killed below either way
                logger.debug("%s: stop failed: %r", self.label, exc)
        self.kill()

    def kill(self) -> None:
        """Kill the actor now (tests of replica death; shutdown; last resort)."""
        if self.actor is None:
            return
        import ray

        if not ray.is_initialized():  # Ray is gone already (ray.kill would start a new one)
            return
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception as exc:  # pragma: no cover - Ray already gone
            logger.debug("%s: kill failed: %r", self.label, exc)


def _leased(actor_id: str | None) -> bool:
    """Whether Ray placed the actor: a worker process was leased for it on some node (state
    API; unreadable: not known to be placed, the wait goes on until the actor is ready)."""
    try:
        from ray.util.state import get_actor

        state = get_actor(actor_id, address=state_address(), timeout=5) if actor_id else None
    except Exception as exc:
        logger.debug("actor %s: state API unavailable: %r", actor_id, exc)
        return False
    return state is not None and (bool(state.pid) or state.state in ("ALIVE", "DEAD"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
