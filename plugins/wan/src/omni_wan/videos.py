"""``/v1/videos``: asynchronous video jobs on a pipeline with a ``wan`` stage (OpenAI's videos API,
as the official ``openai`` client calls it, plus vllm-omni's generation fields).

* ``POST /v1/videos`` (multipart form, as the SDK sends it, or JSON) → a job ``queued``;
* ``GET /v1/videos/{id}`` → its status, with ``progress`` (0-100) from the denoising steps;
* ``GET /v1/videos`` → the jobs, newest first (``limit``, ``after``, ``order``);
* ``GET /v1/videos/{id}/content`` → the MP4 once ``completed``;
* ``DELETE /v1/videos/{id}`` → the job gone; a running one is aborted (between two denoising
  steps: the stage drops the sample, a whole-sample retry).

**Jobs live in memory only**: a restart of ``omni serve`` loses every job and video. Bounded:
at most ``OMNI_VIDEO_MAX_JOBS`` (default 8) jobs queued or running (past it: 429 naming the
limit); one request's frames x height x width within the stage's ``max_voxels`` (400 naming the
field); a finished video is kept ``OMNI_VIDEO_RETENTION_S`` (default 3600) seconds, then dropped
(``expires_at``), and at most ``OMNI_VIDEO_MAX_KEPT`` (default 32) finished jobs are kept (the
oldest finished goes first).

FastAPI resolves the route functions' annotations from this module's globals: ``Request`` and
``Response`` are imported at the top (this module is imported only when ``omni serve`` mounts
the route).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

logger = logging.getLogger(__name__)

MAX_SECONDS = 60
# the stage's request options -> the body's fields (in 400s)
BODY_FIELDS = {"steps": "num_inference_steps", "height": "size", "width": "size"}


class VideoCreate(BaseModel):
    """A create request's fields (form fields arrive as strings; pydantic converts them)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=4000)
    model: str | None = None
    seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS, description="length")
    size: str | None = Field(default=None, pattern=r"^\d+x\d+$", description="WIDTHxHEIGHT")
    num_frames: int | None = Field(default=None, ge=1, description="4k+1; over seconds x fps")
    fps: int | None = Field(default=None, ge=1, le=120)
    num_inference_steps: int | None = Field(default=None, ge=1, le=200)
    guidance_scale: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    guidance_scale_2: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    negative_prompt: str | None = Field(default=None, max_length=4000)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    user: str | None = None


@dataclass
class Job:
    id: str
    prompt: str
    model: str
    size: str
    seconds: str
    created_at: int
    status: Literal["queued", "in_progress", "completed", "failed"] = "queued"
    progress: int = 0
    completed_at: int | None = None
    expires_at: int | None = None
    error: dict[str, str] | None = None
    mp4: bytes | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "video",
            "model": self.model,
            "prompt": self.prompt,
            "status": self.status,
            "progress": self.progress,
            "size": self.size,
            "seconds": self.seconds,
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "expires_at": self.expires_at,
            "error": self.error,
            "remixed_from_video_id": None,
        }


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


class VideoJobs:
    """The in-memory job store of one server (all on the event loop: no locks)."""

    def __init__(self, engine: Any, stage: Any, args: Any) -> None:
        self.engine, self.stage, self.args = engine, stage, args
        self.max_jobs = _env_int("OMNI_VIDEO_MAX_JOBS", 8)
        self.retention_s = _env_int("OMNI_VIDEO_RETENTION_S", 3600)
        self.max_kept = _env_int("OMNI_VIDEO_MAX_KEPT", 32)
        self.jobs: dict[str, Job] = {}

    def expire(self) -> None:
        now = time.time()
        for job in list(self.jobs.values()):
            if job.expires_at is not None and job.expires_at <= now:
                del self.jobs[job.id]
        done = sorted(
            (j for j in self.jobs.values() if j.status in ("completed", "failed")),
            key=lambda j: j.completed_at or 0,
        )
        for job in done[: max(0, len(done) - self.max_kept)]:
            del self.jobs[job.id]

    def create(self, request: VideoCreate) -> Job:
        from omni_core import RequestError
        from omni_core.extend import ApiError
        from omni_wan.kind import checked_options

        self.expire()
        active = sum(j.status in ("queued", "in_progress") for j in self.jobs.values())
        if active >= self.max_jobs:
            raise ApiError(
                429,
                f"{active} video jobs queued or running, at most {self.max_jobs} "
                "(OMNI_VIDEO_MAX_JOBS): retry later",
                type_="rate_limit_error",
            )
        wan, width, height, seconds = self.options(request)
        voxels = wan["num_frames"] * width * height
        if voxels > self.args.max_voxels:
            raise ApiError(
                400,
                f"num_frames x size: {wan['num_frames']} x {width}x{height} = {voxels}, at most "
                f"{self.args.max_voxels} (stage '{self.stage.name}' engine_args.max_voxels)",
                param="num_frames",
            )
        extra: dict[str, Any] = {"wan": wan}
        if request.negative_prompt is not None or request.guidance_scale is not None:
            cfg: dict[str, Any] = {"enabled": True}
            if request.negative_prompt is not None:
                cfg["negative_prompt"] = request.negative_prompt
            if request.guidance_scale is not None:
                cfg["guidance_scale"] = request.guidance_scale
            extra["cfg"] = cfg
        try:
            checked_options(extra, self.args, self.stage.name)
        except RequestError as exc:  # named as the body names them
            message, param = str(exc).replace("extra['wan'].", ""), exc.param or ""
            param = param.replace("extra['wan'].", "")
            param = BODY_FIELDS.get(param, param)
            for option, body_field in BODY_FIELDS.items():
                message = message.replace(f"{option}:", f"{body_field}:")
            raise ApiError(400, message, param=param) from None
        job = Job(
            id=f"video_{secrets.token_hex(12)}",
            prompt=request.prompt,
            model=request.model or self.engine.pipeline.config.name,
            size=f"{width}x{height}",
            seconds=seconds,
            created_at=int(time.time()),
        )
        self.jobs[job.id] = job
        params: dict[str, dict[str, Any]] = {self.stage.name: {"extra": extra}}
        if request.seed is not None:
            params[self.stage.name]["seed"] = request.seed
        job.task = asyncio.get_running_loop().create_task(self.run(job, params))
        return job

    def options(self, request: VideoCreate) -> tuple[dict[str, Any], int, int, str]:
        """The stage's request options from the body: ``size`` → width/height; ``num_frames``,
        else ``seconds`` x ``fps`` rounded to the nearest 4k+1, else the stage's."""
        from omni_core.extend import ApiError

        args = self.args
        width, height = args.width, args.height
        if request.size is not None:
            width, height = (int(x) for x in request.size.split("x"))
        fps = request.fps or args.fps
        frames = request.num_frames
        if frames is None and request.seconds is not None:
            frames = max(1, round(request.seconds * fps / 4) * 4 + 1)
        frames = frames or args.num_frames
        if frames % 4 != 1:
            raise ApiError(400, f"num_frames: {frames}, Wan needs 4k+1 frames", param="num_frames")
        wan: dict[str, Any] = {"width": width, "height": height, "num_frames": frames, "fps": fps}
        if request.num_inference_steps is not None:
            wan["steps"] = request.num_inference_steps
        if request.guidance_scale_2 is not None:
            wan["guidance_scale_2"] = request.guidance_scale_2
        return wan, width, height, f"{(frames - 1) / fps:g}"

    async def run(self, job: Job, params: dict[str, Any]) -> None:
        from omni_wan.video import Progress, Video, mp4_bytes

        try:
            async for out in self.engine.generate(job.prompt, sampling_params=params):
                if out.error is not None:
                    job.status, job.error = (
                        "failed",
                        {
                            "code": str(out.error.status_code),
                            "message": out.error.message,
                        },
                    )
                elif isinstance(out.payload, Progress):
                    job.status = "in_progress"
                    job.progress = min(99, 100 * out.payload.step // out.payload.steps)
                elif isinstance(out.payload, Video):
                    job.mp4 = await asyncio.to_thread(
                        mp4_bytes, out.payload.frames, out.payload.fps
                    )
                    job.status, job.progress = "completed", 100
            if job.status not in ("completed", "failed"):
                job.status, job.error = "failed", {"code": "500", "message": "no video produced"}
        except asyncio.CancelledError:  # DELETE: closing the stream aborts the request
            raise
        except Exception as exc:
            logger.exception("video job %s failed", job.id)
            job.status, job.error = "failed", {"code": "500", "message": str(exc)}
        job.completed_at = int(time.time())
        job.expires_at = job.completed_at + self.retention_s

    def get(self, video_id: str) -> Job:
        from omni_core.extend import ApiError

        self.expire()
        job = self.jobs.get(video_id)
        if job is None:
            raise ApiError(404, f"video '{video_id}' not found", param="video_id")
        return job

    async def delete(self, video_id: str) -> dict[str, Any]:
        job = self.get(video_id)
        del self.jobs[video_id]
        if job.task is not None and not job.task.done():
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return {"id": video_id, "object": "video.deleted", "deleted": True}


async def parse_create(request: Request) -> VideoCreate:
    """The body (multipart/urlencoded form or JSON) as :class:`VideoCreate`; one 400 naming the
    first bad field."""
    from omni_core.extend import ApiError

    kind = request.headers.get("content-type", "")
    try:
        if kind.startswith("application/json"):
            data = await request.json()
        else:
            form = await request.form()
            data = {k: v for k, v in form.items() if isinstance(v, str)}
            if "input_reference" in form:
                raise ApiError(
                    400,
                    "input_reference: image-to-video is not supported by this text-to-video model",
                    param="input_reference",
                )
    except (ValueError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON or form data: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be an object")
    try:
        return VideoCreate.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "body"
        raise ApiError(400, f"{where}: {first['msg']}", param=where) from None


def mount(app: Any, engine: Any) -> None:
    """Add ``/v1/videos`` when the server's pipeline has a final ``wan`` stage."""
    from omni_wan.kind import WanArgs

    stages = [
        s
        for s in getattr(getattr(engine, "pipeline", None), "stages", {}).values()
        if s.kind.name == "wan" and isinstance(s.args, WanArgs)
    ]
    if not stages:
        return
    jobs = VideoJobs(engine, stages[0], stages[0].args)
    app.state.video_jobs = jobs

    @app.post("/v1/videos")
    async def create_video(request: Request) -> dict[str, Any]:
        return jobs.create(await parse_create(request)).body()

    @app.get("/v1/videos")
    async def list_videos(
        limit: int = 20, after: str | None = None, order: str = "desc"
    ) -> dict[str, Any]:
        from omni_core.extend import ApiError

        if not 1 <= limit <= 100 or order not in ("asc", "desc"):
            raise ApiError(400, "limit: 1..100; order: asc or desc", param="limit")
        jobs.expire()
        items = sorted(jobs.jobs.values(), key=lambda j: j.created_at, reverse=order == "desc")
        if after is not None:
            ids = [j.id for j in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        page = items[:limit]
        return {
            "object": "list",
            "data": [j.body() for j in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": len(items) > limit,
        }

    @app.get("/v1/videos/{video_id}")
    async def retrieve_video(video_id: str) -> dict[str, Any]:
        return jobs.get(video_id).body()

    @app.get("/v1/videos/{video_id}/content")
    async def video_content(video_id: str, variant: str = "video") -> Response:
        from omni_core.extend import ApiError

        job = jobs.get(video_id)
        if variant != "video":
            raise ApiError(400, f"variant: {variant!r}, only 'video'", param="variant")
        if job.status != "completed" or job.mp4 is None:
            raise ApiError(
                409, f"video '{video_id}' is {job.status}, not completed", param="video_id"
            )
        return Response(job.mp4, media_type="video/mp4")

    @app.delete("/v1/videos/{video_id}")
    async def delete_video(video_id: str) -> dict[str, Any]:
        return await jobs.delete(video_id)
