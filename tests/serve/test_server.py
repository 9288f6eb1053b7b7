"""``omni serve`` against real clients on loopback: the openai client and raw httpx."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from tests.serve.conftest import running_server

PIPE = """
name: chat-test
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 5, delay_s: 0.002}, final_output: true}
  - {id: 1, name: voice, kind: scripted, inputs: [0], engine_args: {num_tokens: 2}, final_output: true, final_output_type: audio}
"""
SLOW = PIPE.replace("delay_s: 0.002", "delay_s: 0.05")


@pytest.fixture(scope="module")
def server():
    with running_server(PIPE, api_key="sekret") as running:
        yield running


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="sekret", max_retries=0)


def test_models_and_chat_completion(server):
    base, engine, _ = server
    c = client(base)
    assert [m.id for m in c.models.list().data] == ["chat-test"]
    reply = c.chat.completions.create(
        model="chat-test", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content.count("thinker:") == 5
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 5


def test_streaming_chat_yields_every_token(server):
    base, _, _ = server
    stream = client(base).chat.completions.create(
        model="chat-test", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text.count("thinker:") == 5
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_n_is_honoured(server):
    base, _, _ = server
    reply = client(base).chat.completions.create(
        model="chat-test", messages=[{"role": "user", "content": "hi"}], n=3, max_tokens=2
    )
    assert [ch.index for ch in reply.choices] == [0, 1, 2]
    assert all(ch.message.content.count("thinker:") == 2 for ch in reply.choices)
    assert all(ch.finish_reason == "length" for ch in reply.choices)


def test_errors_follow_openai_bodies(server):
    base, _, _ = server
    auth = {"Authorization": "Bearer sekret"}
    with httpx.Client(base_url=base, headers=auth) as h:
        r = h.post(
            "/v1/chat/completions",
            json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = h.post("/v1/chat/completions", json={"model": "chat-test", "messages": []})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        r = h.post(
            "/v1/chat/completions",
            json={"model": "chat-test", "n": 0, "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        json_type = {"content-type": "application/json"}
        r = h.post("/v1/chat/completions", content=b"{not json", headers=json_type)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = h.post("/v1/images/generations", json={"model": "chat-test", "prompt": "x"})
        assert r.status_code == 400
    r = httpx.post(f"{base}/v1/chat/completions", json={})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_burst_past_admission_gets_429_and_nothing_is_lost():
    with running_server(SLOW, max_inflight=2) as (base, engine, metrics):

        async def one(h):
            return await h.post(
                "/v1/chat/completions",
                json={"model": "chat-test", "messages": [{"role": "user", "content": "x"}]},
            )

        async def burst():
            async with httpx.AsyncClient(base_url=base, timeout=30) as h:
                return await asyncio.gather(*(one(h) for _ in range(8)))

        responses = asyncio.run(burst())
        codes = sorted(r.status_code for r in responses)
        assert codes.count(200) >= 2 and codes.count(429) >= 1
        assert set(codes) <= {200, 429}
        assert all(r.headers["retry-after"] == "1" for r in responses if r.status_code == 429)
        assert all(
            r.json()["choices"][0]["finish_reason"] == "stop"
            for r in responses
            if r.status_code == 200
        )
        assert engine.num_active_requests == 0
        text = httpx.get(f"{base}/metrics").text
        assert f'omni_requests_total{{outcome="finished"}} {codes.count(200)}.0' in text


def test_metrics_count_requests_by_outcome():
    with running_server(SLOW) as (base, engine, _):
        c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        for _ in range(3):
            c.chat.completions.create(
                model="chat-test",
                modalities=["text", "audio"],
                messages=[{"role": "user", "content": "ok"}],
            )
        # one client disconnect mid-request: the engine aborts it
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{base}/v1/chat/completions",
                timeout=0.1,
                json={"model": "chat-test", "messages": [{"role": "user", "content": "bye"}]},
            )
        deadline = time.monotonic() + 5
        while engine.num_active_requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.num_active_requests == 0
        text = httpx.get(f"{base}/metrics").text
        assert 'omni_requests_total{outcome="finished"} 3.0' in text
        assert 'omni_requests_total{outcome="aborted"} 1.0' in text
        assert 'omni_aborts_total{reason="abort"} 1.0' in text
        assert "omni_request_latency_seconds_count 4.0" in text
        assert 'omni_stage_first_output_seconds_count{stage="thinker"}' in text
        assert 'omni_edge_transfer_seconds_count{edge="thinker->voice"} 3.0' in text
        assert "omni_requests_in_flight 0.0" in text
        assert 'omni_replica_healthy{replica="0",stage="thinker"} 1.0' in text


def test_stage_down_gives_503_and_health_503():
    with running_server(PIPE) as (base, engine, _):
        assert httpx.get(f"{base}/health").status_code == 200
        asyncio.run(engine.collective_rpc("die", stage_ids=[1]))
        deadline = time.monotonic() + 5
        while engine.health()["stages"]["voice"]["live"] and time.monotonic() < deadline:
            time.sleep(0.01)
        r = httpx.post(
            f"{base}/v1/chat/completions",
            json={
                "model": "chat-test",
                "messages": [{"role": "user", "content": "x"}],
                "modalities": ["audio"],
            },
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "StageUnavailableError"
        health = httpx.get(f"{base}/health")
        assert health.status_code == 503 and health.json()["stages"]["voice"]["live"] is False


def test_tracing_spans_per_request_and_stage():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list = []
    recording = PIPE.replace("name: voice, kind: scripted", "name: voice, kind: recording")
    with running_server(
        recording, tracer_provider=provider, plugins=[("recorder", recording_kind(seen))]
    ) as (base, _, _):
        client_ = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        client_.chat.completions.create(
            model="chat-test",
            modalities=["text", "audio"],
            messages=[{"role": "user", "content": "t"}],
        )
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "omni.request"]
    stages = sorted(s.name for s in spans if s.name.startswith("omni.stage."))
    assert len(roots) == 1 and roots[0].attributes["omni.finish_reason"] == "stop"
    assert stages == ["omni.stage.thinker", "omni.stage.voice"]
    assert all(
        s.parent.span_id == roots[0].context.span_id
        for s in spans
        if s.name.startswith("omni.stage.")
    )
    # the trace context travels with the stage request (into stage processes, vLLM's headers)
    [context] = seen
    assert context["traceparent"].split("-")[1] == f"{roots[0].context.trace_id:032x}"


def recording_kind(seen: list):
    import types

    from omni_core import PLUGIN_API_VERSION, hookimpl
    from omni_core.plugin.types import StageKind
    from omni_core.testing.scripted import ScriptedStageClient
    from omni_core.testing.scripted_core import ScriptedArgs

    class Recording(ScriptedStageClient):
        async def add_request(self, request):
            seen.append(request.trace_context)
            await super().add_request(request)

    module = types.ModuleType("recorder")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    def make(stage, replica, context):
        return Recording("rec", stage.name, ScriptedArgs.model_validate(stage.engine_args))

    @hookimpl
    def omni_register_stage_kinds():
        return [StageKind("recording", make, ScriptedArgs)]

    module.omni_register_stage_kinds = omni_register_stage_kinds
    return module


def test_embedded_engine_exposes_metrics_on_its_own_port(make_engine, omni_settings):
    from tests.serve.conftest import free_port

    port = free_port()
    engine = make_engine(PIPE, settings=omni_settings.model_copy(update={"metrics_port": port}))

    async def go():
        async for _ in engine.generate("x"):
            pass

    asyncio.run(go())
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert 'omni_requests_total{outcome="finished"} 1.0' in text
    engine.shutdown()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)


def test_sigterm_drains_in_flight_requests(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import threading

    from tests.serve.conftest import free_port

    (tmp_path / "p.yaml").write_text(SLOW)
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_TESTING_KIT"
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omni_core.cli",
            "serve",
            str(tmp_path / "p.yaml"),
            "--port",
            str(port),
            "--grace-s",
            "10",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        result = {}

        def slow_request():
            result["r"] = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                timeout=30,
                json={"model": "chat-test", "messages": [{"role": "user", "content": "x"}]},
            )

        worker = threading.Thread(target=slow_request)
        worker.start()
        time.sleep(0.1)  # the request is in flight (5 tokens x 50 ms)
        proc.send_signal(signal.SIGTERM)
        worker.join(30)
        assert result["r"].status_code == 200  # finished within the grace period
        assert result["r"].json()["choices"][0]["message"]["content"].count("thinker:") == 5
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_token_counters_agree_with_usage(server):
    base, _, metrics = server
    c = client(base)

    def counted():
        prompt = metrics.prompt_tokens._value.get()
        text = metrics.completion_tokens.labels("text")._value.get()
        return prompt, text

    before = counted()
    whole = c.chat.completions.create(
        model="chat-test", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    chunks = list(
        c.completions.create(
            model="chat-test",
            prompt=[5, 6, 7],
            max_tokens=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = chunks[-1].usage
    assert streamed.prompt_tokens == 3 and streamed.completion_tokens == 2
    after = counted()
    assert after[0] - before[0] == whole.usage.prompt_tokens + streamed.prompt_tokens
    assert after[1] - before[1] == whole.usage.completion_tokens + streamed.completion_tokens == 5


def test_invalid_sampling_fields_name_their_param(server):
    base, _, _ = server
    with httpx.Client(base_url=base, headers={"Authorization": "Bearer sekret"}) as h:
        for field, value in [("temperature", -1), ("top_p", 0), ("seed", 2**70), ("n", 1000)]:
            r = h.post(
                "/v1/chat/completions",
                json={
                    "model": "chat-test",
                    "messages": [{"role": "user", "content": "x"}],
                    field: value,
                },
            )
            assert r.status_code == 400, (field, r.text)
            assert r.json()["error"]["param"] == field, (field, r.text)
