"""``OmniEngine``: blocking twin of :class:`AsyncOmniEngine` for scripts."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_core.engine.async_engine import AsyncOmniEngine
from omni_core.outputs import AbortResult, OmniRequestOutput
from omni_core.sampling import SamplingParams


class OmniEngine:
    """Runs an :class:`AsyncOmniEngine` on a private event loop in the calling thread."""

    def __init__(self, pipeline: Any, **kwargs: Any) -> None:
        self.engine = AsyncOmniEngine(pipeline, **kwargs)
        self._loop = asyncio.new_event_loop()

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        modalities: list[str] | None = None,
    ) -> list[list[OmniRequestOutput]]:
        """Run every prompt concurrently; one list of outputs per prompt, in prompt order."""
        if not isinstance(prompts, list) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]

        async def one(prompt: Any) -> list[OmniRequestOutput]:
            return [
                o
                async for o in self.engine.generate(
                    prompt, sampling_params=sampling_params, modalities=modalities
                )
            ]

        async def run_all() -> list[list[OmniRequestOutput]]:
            return list(await asyncio.gather(*(one(p) for p in prompts)))

        return self._loop.run_until_complete(run_all())

    def abort(self, request_ids: str | list[str]) -> None:
        self.engine.abort(request_ids)

    def abort_sync(self, request_ids: str | list[str], timeout: float | None = None) -> AbortResult:
        return self._loop.run_until_complete(self.engine.abort_async(request_ids, timeout))

    def collective_rpc(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: list[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        return self._loop.run_until_complete(
            self.engine.collective_rpc(method, args, kwargs, stage_ids, timeout)
        )

    def sleep(self, level: int = 1, stage_ids: list[int] | None = None) -> list[Any]:
        return self._loop.run_until_complete(self.engine.sleep(level, stage_ids))

    def wake_up(
        self, tags: list[str] | None = None, stage_ids: list[int] | None = None
    ) -> list[Any]:
        return self._loop.run_until_complete(self.engine.wake_up(tags, stage_ids))

    def pause_scheduler(self, stage_ids: list[int] | None = None) -> list[Any]:
        return self._loop.run_until_complete(self.engine.pause_scheduler(stage_ids))

    def resume_scheduler(self, stage_ids: list[int] | None = None) -> list[Any]:
        return self._loop.run_until_complete(self.engine.resume_scheduler(stage_ids))

    def is_alive(self) -> bool:
        return self.engine.is_alive()

    @property
    def num_active_requests(self) -> int:
        return self.engine.num_active_requests

    def shutdown(self) -> None:
        self.engine.shutdown()
        if not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> OmniEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
