"""A large multimodal prompt (a 16 Mpx image) crosses to a process replica without blocking the
orchestrator loop: its frame is packed in a thread, the replica gets the same pixels, and the
request's later frames (a stream input, an abort) never overtake its add."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from omni_core.sampling import SamplingParams
from omni_core.stage.client import StageRequest
from omni_core.stage.process import ProcessStageClient

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 256, (4096, 4096, 3), dtype=np.uint8)
    return Image.fromarray(pixels)  # 48 MB of pixels, as a 16 Mpx PNG decodes


@pytest.fixture
async def client() -> AsyncIterator[ProcessStageClient]:
    config = {"factory": "tests.stage.engines:media_echo"}
    replica = ProcessStageClient("stage 'echo' replica 0", config, env={"PYTHONPATH": str(ROOT)})
    await replica.start()
    yield replica
    await replica.shutdown()


def request(rid: str, prompt: object) -> StageRequest:
    return StageRequest(request_id=rid, prompt=prompt, params=SamplingParams())


async def test_a_16_mpx_image_never_blocks_the_loop_50_ms_and_arrives_pixel_equal(client, image):
    worst = 0.0
    done = asyncio.Event()

    async def probe() -> None:  # the loop's lag: how late a 5 ms sleep wakes
        nonlocal worst
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - start - 0.005)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.02)
    prompt = {"prompt": "describe", "multi_modal_data": {"image": image}}
    await client.add_request(request("r", prompt))
    seen = await client.collective_rpc("seen", (), {})  # answered after the add was handled
    done.set()
    await prober
    digest = hashlib.sha256(image.tobytes()).hexdigest()
    expected = {"prompt": "describe", "multi_modal_data": {"image": ["RGB", [4096, 4096], digest]}}
    assert seen == [["add", "r", expected]]
    assert worst < 0.05, f"the loop was blocked {worst * 1000:.0f} ms"


async def test_a_request_s_input_and_abort_never_overtake_its_large_add(client, image):
    big = {"prompt": "x", "multi_modal_data": {"image": image}}
    adding = asyncio.create_task(client.add_request(request("r", big)))
    await asyncio.sleep(0)  # the add is being packed in a thread
    assert "r" in client._packing
    await client.add_request(request("other", "small"))  # another request does not wait
    await client.add_input("r", "more", final=True)
    await client.abort(["r"])
    await adding
    seen = await client.collective_rpc("seen", (), {})
    assert [entry[:2] for entry in seen] == [
        ["add", "other"],
        ["add", "r"],
        ["input", "r"],
        ["abort", "r"],
    ]
    assert not client._packing


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "1", "I;16", "F"])
def test_shared_images_and_arrays_unpickle_equal_and_leave_no_file(tmp_path, mode):
    import os
    import pickle

    from omni_core.stage.dataplane import SharedMemoryDataPlane
    from omni_core.stage.shared_media import share_media

    pixels = np.random.default_rng(1).integers(0, 256, (700, 1001, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)  # ≥ 256 KiB of pixels in every mode but "1"
    if mode == "1":
        image = image.resize((3001, 1000))
    image.info["note"] = "kept"
    audio = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    prompt = {"prompt": "x", "multi_modal_data": {"image": [image], "audio": (audio, 16000)}}
    paths: list[str] = []
    shared = share_media(prompt, SharedMemoryDataPlane(str(tmp_path)), paths)
    assert len(paths) == 2 and all(os.path.exists(p) for p in paths)
    frame = pickle.dumps(shared)
    assert len(frame) < 4096  # the pixels and samples are in the files
    back = pickle.loads(frame)
    assert not os.listdir(tmp_path)  # read once, then removed
    got = back["multi_modal_data"]["image"][0]
    assert type(got) is type(image) and got.mode == mode and got.size == image.size
    assert got.tobytes() == image.tobytes() and got.getpalette() == image.getpalette()
    assert got.info == image.info
    samples, rate = back["multi_modal_data"]["audio"]
    assert rate == 16000 and np.array_equal(samples, audio)


async def test_shared_files_a_dead_worker_never_read_are_removed(client, image):
    import os

    await client.add_request(request("busy", "sleep"))  # the worker reads nothing for 30 s
    await client.add_request(request("r", {"multi_modal_data": {"image": image}}))
    [path] = client._shared["r"]
    assert os.path.exists(path)
    client.kill()
    for _ in range(500):
        if client._dead is not None:
            break
        await asyncio.sleep(0.01)
    assert client._dead is not None and not os.path.exists(path) and not client._shared
