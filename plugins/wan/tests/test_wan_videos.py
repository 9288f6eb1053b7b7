"""``omni serve``'s ``/v1/videos`` (mounted by omni-wan) with the official ``openai`` client: a job
whose ``progress`` rises to a downloadable MP4 of the asked frames and size; bad fields are 400s
naming them; DELETE aborts a running job; list pages."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from omni_wan.video import read_mp4

from omni_core.config.settings import OmniSettings
from omni_core.testing.server import running_server


@pytest.fixture(scope="module")
def server(wan_cache, tiny_wan):
    import omni_cfg.plugin
    import omni_wan.plugin

    settings = OmniSettings(cache_dir=wan_cache, startup_timeout_s=300.0, shutdown_timeout_s=5.0)
    plugins = [("wan", omni_wan.plugin), ("cfg", omni_cfg.plugin)]  # not other plugins' WIP
    with running_server("wan2.1-t2v", plugins=plugins, settings=settings) as (url, _, _):
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


def test_a_job_progresses_to_an_mp4_of_the_asked_frames_and_size(client):
    video = client.videos.create(
        prompt="a red cat running",
        model="wan2.1-t2v",
        size="48x32",  # type: ignore[arg-type]  (OpenAI's sizes are a Literal; any WxH here)
        extra_body={"num_frames": 9, "fps": 8, "num_inference_steps": 100, "seed": 1},
    )
    assert video.status in ("queued", "in_progress") and video.size == "48x32"
    seen = []
    while video.status in ("queued", "in_progress"):
        time.sleep(0.02)
        video = client.videos.retrieve(video.id)
        seen.append(video.progress)
    assert video.status == "completed" and video.progress == 100, video.error
    rising = [p for p in seen if 0 < p < 100]
    assert rising and rising == sorted(rising)  # progress from the denoising steps
    frames, fps = read_mp4(client.videos.download_content(video.id).content)
    assert frames.shape == (9, 32, 48, 3) and fps == 8
    listed = client.videos.list(limit=10)
    assert video.id in [v.id for v in listed.data]


def test_delete_aborts_a_running_job_and_the_stage_serves_on(server, client):
    video = client.videos.create(
        prompt="a cat", extra_body={"num_inference_steps": 200, "size": "32x32"}
    )
    while client.videos.retrieve(video.id).progress == 0:
        time.sleep(0.01)
    deleted = client.videos.delete(video.id)
    assert deleted.deleted and deleted.id == video.id
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(video.id)
    after = client.videos.create(prompt="a dog", extra_body={"num_inference_steps": 2})
    while after.status in ("queued", "in_progress"):
        time.sleep(0.02)
        after = client.videos.retrieve(after.id)
    assert after.status == "completed"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"num_frames": "6"}, "num_frames"),
        ({"size": "big"}, "size"),
        ({"size": "40x40"}, "size"),
        ({"num_frames": "33", "size": "512x512"}, "num_frames"),
        ({"num_inference_steps": "0"}, "num_inference_steps"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_field_is_a_400_naming_it(server, fields, param):
    reply = httpx.post(f"{server}/v1/videos", data={"prompt": "a cat", **fields}, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["message"].startswith(param), error
