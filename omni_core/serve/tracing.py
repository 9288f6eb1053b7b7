"""OpenTelemetry: a root span per request, a child span per stage visit.

Off by default and free when off (no plugin is registered). On when ``OTEL_TRACES_EXPORTER`` is
set to something other than ``none`` (the SDK then reads the standard ``OTEL_*`` variables), or
when a tracer provider is given explicitly (tests use an in-memory exporter).
"""

from __future__ import annotations

import os
from typing import Any

from omni_core.plugin import PLUGIN_API_VERSION, hookimpl


def tracing_requested() -> bool:
    return os.environ.get("OTEL_TRACES_EXPORTER", "none").lower() not in ("", "none")


def default_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip()
    if exporter_name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter: Any = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class OmniTracing:
    """A plugin object: spans follow the orchestrator's request lifecycle hooks."""

    OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self.tracer = provider.get_tracer("omni_core")
        self._roots: dict[str, Any] = {}
        self._stages: dict[tuple[str, int], Any] = {}
        self._stage_ids: set[int] = set()

    @hookimpl
    def omni_request_admitted(self, run_id: str, request: Any, port: Any) -> None:
        span = self.tracer.start_span(
            "omni.request",
            attributes={
                "omni.request_id": run_id,
                "omni.pipeline": port.pipeline.config.name,
            },
        )
        self._roots[run_id] = span
        # Carried into stage processes with every stage request. Core-internal: the run's tags
        # are a dict (plugins see them read-only and set them through Admission.tags).
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        request.tags["trace_context"] = carrier

    @hookimpl
    def omni_stage_submitted(self, run_id: str, stage_id: int, replica: int, port: Any) -> None:
        root = self._roots.get(run_id)
        if root is None:
            return
        context = self._trace.set_span_in_context(root)
        name = port.pipeline.stages[stage_id].name
        self._stage_ids.add(stage_id)
        self._stages[(run_id, stage_id)] = self.tracer.start_span(
            f"omni.stage.{name}",
            context=context,
            attributes={"omni.stage_id": stage_id, "omni.replica": replica},
        )

    @hookimpl
    def omni_stage_output(self, run_id: str, stage_id: int, output: Any) -> None:
        if output.finished:
            span = self._stages.pop((run_id, stage_id), None)
            if span is not None:
                span.end()

    @hookimpl
    def omni_request_terminal(self, run_id: str, finish_reason: str) -> None:
        for stage_id in self._stage_ids:  # per stage, not a scan of every request's spans
            span = self._stages.pop((run_id, stage_id), None)
            if span is not None:
                span.end()
        root = self._roots.pop(run_id, None)
        if root is not None:
            root.set_attribute("omni.finish_reason", finish_reason)
            root.end()
