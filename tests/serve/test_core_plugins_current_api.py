"""The server's own plugins (metrics, tracing) take the hooks' current arguments: starting
``omni serve``'s app emits no DeprecationWarning, so a ``-W error::DeprecationWarning`` run
starts (issue 36: 4 warnings located in omni_core/serve/metrics.py on every start)."""

from __future__ import annotations

import warnings

import httpx

from omni_core.testing.server import running_server

PIPE = """
name: strict-start
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


def test_the_app_starts_and_answers_with_deprecation_warnings_as_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with running_server(PIPE) as (base, engine, _):
            body = {"model": "strict-start", "messages": [{"role": "user", "content": "hi"}]}
            assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 200
            assert (
                'omni_requests_total{outcome="finished"} 1.0' in httpx.get(f"{base}/metrics").text
            )


def test_tracing_plugin_takes_run_id_too():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with running_server(PIPE, tracer_provider=provider) as (base, _, _):
            body = {"model": "strict-start", "messages": [{"role": "user", "content": "hi"}]}
            assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 200
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["omni.request", "omni.stage.thinker"]
