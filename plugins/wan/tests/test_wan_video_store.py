"""The ``/v1/videos`` job store's bounds without an engine: the queue length (429 naming the
limit), retention (a finished job past ``expires_at`` is gone), and the kept-finished cap."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from omni_wan.kind import WanArgs
from omni_wan.videos import VideoCreate, VideoJobs

from omni_core.extend import ApiError


class StuckEngine:
    """Never produces an output (a job stays queued until cancelled)."""

    pipeline = SimpleNamespace(config=SimpleNamespace(name="wan2.1-t2v"))

    async def generate(self, prompt, sampling_params=None):
        await asyncio.Event().wait()
        yield  # pragma: no cover


def store(monkeypatch, **env: str) -> VideoJobs:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = WanArgs(model="tiny-wan2.1", steps=2, height=32, width=32, num_frames=5)
    return VideoJobs(StuckEngine(), SimpleNamespace(name="dit"), args)


async def test_past_the_queue_length_a_create_is_a_429_naming_the_limit(monkeypatch):
    jobs = store(monkeypatch, OMNI_VIDEO_MAX_JOBS="2")
    first = [jobs.create(VideoCreate(prompt="a cat")) for _ in range(2)]
    with pytest.raises(ApiError) as refused:
        jobs.create(VideoCreate(prompt="a cat"))
    assert refused.value.status == 429 and "OMNI_VIDEO_MAX_JOBS" in refused.value.message
    await jobs.delete(first[0].id)  # a cancelled job frees its place
    assert jobs.create(VideoCreate(prompt="a cat")).status == "queued"
    for job in list(jobs.jobs):
        await jobs.delete(job)


async def test_finished_jobs_expire_and_the_oldest_go_past_the_cap(monkeypatch):
    jobs = store(monkeypatch, OMNI_VIDEO_MAX_KEPT="2")
    made = [jobs.create(VideoCreate(prompt=f"cat {i}")) for i in range(3)]
    for i, job in enumerate(made):
        assert job.task is not None
        job.task.cancel()
        job.status, job.completed_at = "completed", 100 + i
        job.expires_at = int(time.time()) + 60
    await asyncio.gather(*(j.task for j in made if j.task), return_exceptions=True)
    jobs.expire()
    assert sorted(jobs.jobs) == sorted(j.id for j in made[1:])  # the oldest finished went
    made[2].expires_at = int(time.time()) - 1
    with pytest.raises(ApiError) as gone:
        jobs.get(made[2].id)
    assert gone.value.status == 404
