"""Prometheus metrics, collected by a plugin observing the orchestrator's hooks.

Also usable without the server: ``OMNI_METRICS_PORT`` makes an engine serve ``/metrics`` itself.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from omni_core.media import AudioChunk
from omni_core.plugin import PLUGIN_API_VERSION, hookimpl

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RTF_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 5, 10)
OUTCOMES = {"stop": "finished", "length": "finished", "abort": "aborted", "timeout": "aborted"}


class OmniMetrics:
    """A plugin object (register it with ``PluginHost.register``) holding its own registry."""

    OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("omni_requests", "Requests by outcome", ["outcome"], registry=r)
        self.aborts = Counter("omni_aborts", "Aborted requests by reason", ["reason"], registry=r)
        self.e2e = Histogram(
            "omni_request_latency_seconds",
            "End-to-end request latency",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stage_latency = Histogram(
            "omni_stage_latency_seconds",
            "Time in a stage, submit to finish",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_output = Histogram(
            "omni_stage_first_output_seconds",
            "Time to first output per stage",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.edge = Histogram(
            "omni_edge_transfer_seconds",
            "Upstream finish to downstream submit, per edge",
            ["edge"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.edge_tokens = Counter(
            "omni_edge_transfer_tokens", "Tokens forwarded along each edge", ["edge"], registry=r
        )
        self.inflight = Gauge(
            "omni_requests_in_flight", "Requests the orchestrator holds", registry=r
        )
        self.queued = Gauge(
            "omni_requests_queued", "Messages waiting for the orchestrator", registry=r
        )
        self.replica_up = Gauge(
            "omni_replica_healthy",
            "1 if a stage replica is healthy",
            ["stage", "replica"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "omni_prompt_tokens",
            "Prompt tokens of answered requests (the first stage's, after templating)",
            registry=r,
        )
        self.completion_tokens = Counter(
            "omni_completion_tokens",
            "Completion tokens of answered requests, as reported in their usage",
            ["modality"],
            registry=r,
        )
        self.first_audio = Histogram(
            "omni_time_to_first_audio_seconds",
            "Admission to the first audio samples of a final stage (TTFP)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.audio_rtf = Histogram(
            "omni_audio_rtf",
            "Real-time factor of a request's audio: admission to its last samples / its duration",
            buckets=RTF_BUCKETS,
            registry=r,
        )
        self.audio_underruns = Counter(
            "omni_audio_underruns",
            "Audio pieces that arrived after the audio before them, played at real time from "
            "its first piece's arrival, had run out",
            registry=r,
        )
        self._audio: dict[str, _Playback] = {}
        self._final: frozenset[int] = frozenset()  # final stage ids
        self._lock = threading.Lock()
        self._admitted: dict[str, float] = {}
        self._stages: dict[tuple[str, int], list[float]] = {}  # submit, first, finish
        self._names: dict[int, str] = {}
        self._inputs: dict[int, tuple[int, ...]] = {}  # stage id -> the stages feeding it
        self._finished_at: dict[tuple[str, int], tuple[float, int]] = {}

    def count_usage(self, usage: dict[str, Any]) -> None:
        """Count a response's ``usage`` (server thread): the counters and responses agree."""
        audio = (usage.get("completion_tokens_details") or {}).get("audio_tokens", 0)
        self.prompt_tokens.inc(usage["prompt_tokens"])
        self.completion_tokens.labels("text").inc(usage["completion_tokens"] - audio)
        self.completion_tokens.labels("audio").inc(audio)

    # --- hooks (orchestrator thread) ----------------------------------------------------------
    @hookimpl
    def omni_request_admitted(self, run_id: str, port: Any) -> None:
        if not self._names:
            stages = port.pipeline.stages
            self._names = {sid: s.name for sid, s in stages.items()}
            self._inputs = {
                sid: tuple(e.stage for e in s.config.inputs) for sid, s in stages.items()
            }
            self._final = frozenset(
                sid for sid, s in stages.items() if getattr(s.config, "final_output", False)
            )
        self._admitted[run_id] = time.monotonic()
        self.inflight.inc()

    @hookimpl
    def omni_stage_submitted(self, run_id: str, stage_id: int) -> None:
        now = time.monotonic()
        self._stages[(run_id, stage_id)] = [now, 0.0, 0.0]
        for source in self._inputs.get(stage_id, ()):
            done = self._finished_at.get((run_id, source))
            if done is not None:
                label = f"{self._names.get(source)}->{self._names.get(stage_id)}"
                self.edge.labels(label).observe(now - done[0])
                self.edge_tokens.labels(label).inc(done[1])

    @hookimpl
    def omni_stage_output(self, run_id: str, stage_id: int, output: Any) -> None:
        times = self._stages.get((run_id, stage_id))
        if times is None:
            return
        now = time.monotonic()
        if stage_id in self._final and isinstance(output.payload, AudioChunk):
            self._heard(run_id, output.payload, now)
        name = self._names.get(stage_id, str(stage_id))
        if not times[1]:
            times[1] = now
            self.first_output.labels(name).observe(now - times[0])
        if output.finished:
            self.stage_latency.labels(name).observe(now - times[0])
            done = self._finished_at.get((run_id, stage_id), (now, 0))
            self._finished_at[(run_id, stage_id)] = (now, done[1] + len(output.token_ids))
        elif output.token_ids:
            done = self._finished_at.get((run_id, stage_id), (0.0, 0))
            self._finished_at[(run_id, stage_id)] = (done[0], done[1] + len(output.token_ids))

    @hookimpl
    def omni_request_terminal(self, run_id: str, finish_reason: str) -> None:
        start = self._admitted.pop(run_id, None)
        if start is None:
            return
        self.inflight.dec()
        outcome = OUTCOMES.get(finish_reason, "failed")
        self.requests.labels(outcome).inc()
        if outcome == "aborted":
            self.aborts.labels(finish_reason).inc()
        self.e2e.observe(time.monotonic() - start)
        playback = self._audio.pop(run_id, None)
        if playback is not None and playback.seconds > 0:
            self.audio_rtf.observe((playback.last - start) / playback.seconds)
        for stage_id in self._names:  # per stage, not a scan of every request's keys
            self._stages.pop((run_id, stage_id), None)
            self._finished_at.pop((run_id, stage_id), None)

    def _heard(self, run_id: str, chunk: AudioChunk, now: float) -> None:
        """An audio piece of a final stage: TTFP on the first, an underrun when the audio so
        far (played from the first piece's arrival) ran out before this one came."""
        samples = math.prod(getattr(chunk.samples, "shape", (0,)))
        admitted = self._admitted.get(run_id)
        if not samples or admitted is None or not chunk.sample_rate:
            return
        seconds = samples / chunk.sample_rate
        playback = self._audio.get(run_id)
        if playback is None:
            self.first_audio.observe(now - admitted)
            self._audio[run_id] = _Playback(now + seconds, now, seconds)
            return
        if now > playback.until:
            self.audio_underruns.inc()
            playback.until = now
        playback.until += seconds
        playback.last = now
        playback.seconds += seconds

    # --- scrape ------------------------------------------------------------------------------
    def render(self, engine: Any) -> bytes:
        self.queued.set(len(engine._runtime.inbox))
        for name, stage in engine.health()["stages"].items():
            for i, ok in enumerate(stage["replicas"]):
                self.replica_up.labels(name, str(i)).set(1 if ok else 0)
        return generate_latest(self.registry)


@dataclass
class _Playback:
    """A request's audio so far, as a listener plays it from the first piece's arrival."""

    until: float  # when the audio received so far runs out
    last: float  # arrival of the last piece
    seconds: float  # audio duration so far


def serve_metrics(metrics: OmniMetrics, engine: Any, port: int, host: str = "127.0.0.1") -> Any:
    """Expose ``/metrics`` of an embedded engine on its own port (no FastAPI needed)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.render(engine)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="omni-metrics", daemon=True).start()
    return server
