"""The serving tier on Ray Serve (omni_core.serve.ray_serve): two deployment replicas, each with
its own engine behind the ``omni serve`` app, on the session's local Ray (the engines' stages
are Ray actors too: ``runtime: ray``). Requests land on both, streams work, /metrics is per
replica; a killed replica fails only its in-flight requests, its stage actor goes with it, new
requests go to the survivor, and Serve replaces it. ``omni serve --ray-serve`` (stages local to
each replica) starts and stops its own Ray."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter

import httpx  # the dev extra (setup.sh): a missing httpx fails, never skips
import pytest

from omni_core import OmniSettings
from omni_core.config.pipeline import PipelineConfig
from omni_core.serve.ray_serve import REPLICA_HEADER
from omni_core.stage.ray_placement import state_address
from tests.ray.cluster import free_port, stage_actors_alive

pytestmark = pytest.mark.timeout(180)

MODEL = "serve-scripted"
PIPELINE = f"""
name: {MODEL}
stages:
  - {{id: 0, name: thinker, kind: scripted, engine_args: {{num_tokens: 60, delay_s: 0.03}},
     final_output: true}}
"""
ON_ACTORS = PIPELINE.replace("stages:", "runtime: ray\nstages:").replace(
    "final_output: true}", "final_output: true, resources: {num_cpus: 0.1}}"
)
answered: Counter[str] = Counter()  # finished chat requests per replica, from the headers


def body(max_tokens: int, stream: bool = False) -> dict:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": stream}


def chat(base: str, max_tokens: int = 4):
    reply = httpx.post(f"{base}/v1/chat/completions", json=body(max_tokens), timeout=60)
    if reply.status_code == 200:
        answered[reply.headers[REPLICA_HEADER]] += 1
    return reply


def replica_id(actor_name: str) -> str:
    """A Serve replica actor's name ends with the replica's unique id."""
    return actor_name.rsplit("#", 1)[1]


def serve_actors() -> list[tuple[str, str]]:
    from ray.util.state import list_actors

    alive = list_actors(address=state_address(), filters=[("state", "=", "ALIVE")], limit=10_000)
    return [(a.class_name, a.name) for a in alive if (a.class_name or "").startswith("Serve")]


@pytest.fixture(scope="module")
def served(local_ray):
    from ray import serve

    from omni_core.serve.ray_serve import omni_app

    port = free_port()
    config = PipelineConfig.from_yaml_text(ON_ACTORS, source="<serve test>")
    assert config.runtime == "ray" and config.stages[0].resources.num_cpus == 0.1
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        app = omni_app(config, replicas=2, settings=OmniSettings(), load_plugins=False)
        serve.run(app, name="omni", route_prefix="/", blocking=False)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
    deadline = time.monotonic() + 30
    while serve_actors() or stage_actors_alive():  # controller, proxy, replicas, stages: gone
        assert time.monotonic() < deadline, (serve_actors(), stage_actors_alive())
        time.sleep(0.2)


def test_requests_land_on_both_replicas_with_the_same_routes(served):
    replies: list = []

    def one():
        replies.append(chat(served))

    for _ in range(5):  # concurrent rounds until both replicas answered
        threads = [threading.Thread(target=one) for _ in range(6)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        if len({r.headers[REPLICA_HEADER] for r in replies}) == 2:
            break
    assert len({r.headers[REPLICA_HEADER] for r in replies}) == 2
    texts = set()
    for reply in replies:
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["model"] == MODEL and body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 4
        texts.add(body["choices"][0]["message"]["content"])
    [text] = texts  # every replica runs the same engine: the same answer
    assert [w.split(":")[0] for w in text.split()] == ["thinker"] * 4
    # same app: its errors keep the OpenAI shape
    bad = httpx.post(
        f"{served}/v1/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
    )
    assert bad.status_code == 404 and bad.json()["error"]["code"] == "model_not_found"
    assert httpx.get(f"{served}/v1/models").json()["data"][0]["id"] == MODEL


def test_streamed_response_through_serve(served):
    whole = chat(served, max_tokens=6).json()["choices"][0]["message"]["content"]
    with httpx.stream(
        "POST",
        f"{served}/v1/chat/completions",
        json=body(6, stream=True),
        timeout=60,
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in reply.iter_lines() if line]
        replica = reply.headers[REPLICA_HEADER]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole and len(chunks) >= 6  # one chunk per token, at least
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    answered[replica] += 1


def test_metrics_are_per_replica(served):
    seen: dict[str, float] = {}
    for _ in range(60):
        reply = httpx.get(f"{served}/metrics")
        assert reply.status_code == 200
        found = re.search(r'omni_requests_total\{outcome="finished"\} ([0-9.]+)', reply.text)
        seen[reply.headers[REPLICA_HEADER]] = float(found.group(1)) if found else 0.0
        if len(seen) == 2:
            break
    assert seen == dict(answered)  # each replica counts the requests it answered, only those


def test_killed_replica_fails_its_inflight_requests_and_serve_replaces_it(served, local_ray):
    from ray import serve

    results: dict[int, tuple] = {}
    headers: dict[int, str] = {}
    started = threading.Event()

    def stream(i: int) -> None:
        try:
            with httpx.stream(
                "POST",
                f"{served}/v1/chat/completions",
                json=body(60, stream=True),
                timeout=60,
            ) as reply:
                headers[i] = reply.headers[REPLICA_HEADER]
                lines = []
                for line in reply.iter_lines():
                    if line:
                        lines.append(line)
                        if len(headers) == 4:
                            started.set()
                results[i] = ("done", lines[-1])
        except httpx.HTTPError as exc:
            results[i] = ("cut", type(exc).__name__)

    wholes: list[tuple[int, str | None]] = []

    def whole() -> None:  # not streamed: the answer comes at the end, or an error does
        reply = httpx.post(f"{served}/v1/chat/completions", json=body(60), timeout=60)
        wholes.append((reply.status_code, reply.headers.get(REPLICA_HEADER)))

    stage_actors = set(stage_actors_alive())
    assert len(stage_actors) == 2  # one stage actor per replica's engine
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=whole) for _ in range(2)]
    [t.start() for t in threads]
    assert started.wait(60), headers
    replicas = {replica_id(n): n for c, n in serve_actors() if c.startswith("ServeReplica")}
    assert len(replicas) == 2
    victim = headers[0]
    name = replicas[victim.split("@")[0]]
    killed_at = time.monotonic()
    local_ray.kill(local_ray.get_actor(name, namespace="serve"), no_restart=True)
    [t.join(60) for t in threads]
    assert len(results) == 4
    for i, (outcome, detail) in results.items():
        if headers[i] == victim:  # its streams end mid-body: no [DONE], a clean cut, no hang
            assert outcome == "cut", (i, detail)
        else:
            assert (outcome, detail) == ("done", "data: [DONE]")
    # whole answers: from a live replica, or Serve's 500 for one that was on the dead replica
    assert len(wholes) == 2
    for status_code, replica in wholes:
        assert (status_code == 200 and replica != victim) or (status_code, replica) == (500, None)
    assert time.monotonic() - killed_at < 30

    # new requests go to the survivor (or to the replacement), never to the dead one
    after = [chat(served) for _ in range(6)]  # sequential, right after the kill
    assert all(r.status_code == 200 for r in after)
    assert victim not in {r.headers[REPLICA_HEADER] for r in after}

    # Serve starts a replacement; it answers like the others
    deadline = time.monotonic() + 90
    while True:
        status = serve.status().applications["omni"].deployments["OmniServe"]
        if (
            status.replica_states.get("RUNNING") == 2
            and len([a for a in serve_actors() if a[0].startswith("ServeReplica")]) == 2
        ):
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    now = {replica_id(n) for c, n in serve_actors() if c.startswith("ServeReplica")}
    [new] = now - set(replicas)
    assert victim.split("@")[0] not in now
    seen: set[str] = set()

    def one() -> None:
        reply = chat(served)
        assert reply.status_code == 200
        seen.add(reply.headers[REPLICA_HEADER].split("@")[0])

    for _ in range(15):  # the replacement answers too
        threads = [threading.Thread(target=one) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        if new in seen:
            break
    assert new in seen, seen
    # the dead replica's stage actor died with it (Ray's owner fate-sharing); nothing leaked
    now_stage = set(stage_actors_alive())
    assert len(now_stage) == 2 and len(now_stage & stage_actors) == 1


def test_omni_serve_ray_serve_cli(tmp_path):
    """`omni serve FILE --ray-serve --replicas 2`: its own local Ray, the OpenAI routes through
    Serve, both replicas answering; SIGTERM takes Serve and that Ray down."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.ray.helpers import clean_env, import_psutil

    omni = str(Path(sys.executable).parent / "omni")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    refused = subprocess.run(
        [omni, "serve", str(pipeline), "--replicas", "2"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--replicas 2: only with --ray-serve" in refused.stderr
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [omni, "serve", str(pipeline), "--ray-serve", "--replicas", "2", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(OMNI_HOST="127.0.0.1"),
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        replicas = set()
        for _ in range(30):
            reply = httpx.post(f"{base}/v1/chat/completions", json=body(3), timeout=60)
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["finish_reason"] == "length"
            replicas.add(reply.headers[REPLICA_HEADER])
            if len(replicas) == 2:
                break
        assert len(replicas) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "through Ray Serve (2 replicas)" in text and "stopped the local Ray" in text
    supervisor = int(re.search(r"supervisor pid (\d+)", text).group(1))
    assert not import_psutil().pid_exists(supervisor)


def test_omni_app_from_a_file_or_name_and_bad_input(tmp_path):
    from ray.serve import Application

    from omni_core.errors import ConfigError, StartupError
    from omni_core.serve.ray_serve import omni_app

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE)
    assert isinstance(omni_app(str(pipeline), replicas=2, load_plugins=False), Application)
    assert isinstance(omni_app("tiny-omni"), Application)  # a shipped pipeline, by name
    with pytest.raises(StartupError, match=r"ray serve: replicas must be at least 1 \(got 0\)"):
        omni_app(str(pipeline), replicas=0)
    with pytest.raises(ConfigError, match="no-such-pipeline"):
        omni_app("no-such-pipeline")
