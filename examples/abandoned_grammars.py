"""Abandoned structured-output grammars against ``omni serve`` (issue 34's first scenario).

Starts ``omni serve`` on the tiny thinker (one vLLM stage) and measures:

1. idle: the latency of a ``response_format: json_object`` chat (median of ``--probes``);
2. abandoned: ``--clients`` chats at once, each with a distinct worst-case legal grammar (a
   JSON schema of 700 required properties, just under ``omni_core.grammar``'s bounds), whose
   clients leave after ``--leave-s``; right after, the same ``json_object`` chat (median of
   ``--probes``, one after another). Repeated ``--rounds`` times;
3. the issue's request (20 000 choices, 300 KB): its status and time;
4. memory: the stage's RSS before and after ``--distinct`` more distinct worst-case grammars
   (each answered, 1 token), sampled every ``--distinct // 5``.

``python examples/abandoned_grammars.py [--rounds 3 --clients 4 ...] [--json FILE]``. Linux
(RSS from ``/proc``). Figures: docs/security.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from worst_requests import free_port, label, memory, start, tree

MODEL = "grammar-chat"
PIPE = f"""
name: {MODEL}
stages:
  - id: 0
    name: thinker
    kind: vllm
    engine_args: {{model: tiny-thinker, max_model_len: 512}}
    final_output: true
"""
HI = [{"role": "user", "content": "Say something."}]


def worst_spec(tag: str) -> dict[str, Any]:
    """A JSON schema of 700 required properties, just under ``omni_core.grammar``'s bounds: the
    slowest legal spec found (~0.6 s to compile on a loaded 2-core machine; a choice of 1 000
    strings at the bounds: 0.05 s). ``tag`` makes it distinct (no cache hit)."""
    names = [f"{tag}{i}" for i in range(700)]
    schema = {
        "type": "object",
        "properties": {n: {"type": "integer"} for n in names},
        "required": names,
    }
    from omni_core.grammar import size_problem

    assert size_problem({"json": schema}) is None, "no longer within the bounds"
    return {"json": schema}


def chat(base: str, timeout: float, **fields: Any) -> tuple[int, float]:
    body = {"model": MODEL, "messages": HI, "max_tokens": 16, "temperature": 0, **fields}
    began = time.perf_counter()
    try:
        status = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=timeout).status_code
    except httpx.TimeoutException:
        status = 0  # the client left
    return status, time.perf_counter() - began


def probe(base: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        status, took = chat(base, 300, response_format={"type": "json_object"})
        assert status == 200, status
        out.append(took)
    return out


def stage_rss(root: int) -> int:
    """RSS of the thinker stage process."""
    for pid, (rss, _) in memory(tree(root)).items():
        if label(pid, root) == "thinker":
            return rss
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--leave-s", type=float, default=0.3)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--distinct", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="omni-grammars-"))
    pipe = work / "pipe.yaml"
    pipe.write_text(PIPE)
    port = free_port()
    server = start(str(pipe), port, work / "serve.log")
    base = f"http://127.0.0.1:{port}"
    report: dict[str, Any] = {}
    try:
        probe(base, 2)  # warm: json_object's grammar compiled once (cached from then on)
        idle = probe(base, args.probes)
        report["idle_s"] = idle
        print(f"idle json_object: median {statistics.median(idle):.3f} s, max {max(idle):.3f} s")
        for r in range(args.rounds):
            threads = [
                threading.Thread(
                    target=chat,
                    args=(base, args.leave_s),
                    kwargs={"structured_outputs": worst_spec(f"r{r}c{c}_")},
                )
                for c in range(args.clients)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            after = probe(base, args.probes)
            report.setdefault("after_abandoned_s", []).append(after)
            print(
                f"round {r + 1}: {args.clients} abandoned worst-case grammars, then json_object: "
                f"first {after[0]:.3f} s, median {statistics.median(after):.3f} s, "
                f"max {max(after):.3f} s ({max(after) / statistics.median(idle):.1f}x idle)"
            )
        issue = [f"option number {i:05d} of many" for i in range(20_000)]
        status, took = chat(base, 300, structured_outputs={"choice": issue})
        report["issue_request"] = [status, took]
        print(f"20 000 choices ({len(json.dumps(issue))} B): {status} in {took:.3f} s")
        rss = [stage_rss(server.pid)]
        step = max(1, args.distinct // 5)
        for i in range(args.distinct):
            status, _ = chat(base, 300, max_tokens=1, structured_outputs=worst_spec(f"d{i}_"))
            assert status == 200, status
            if (i + 1) % step == 0:
                rss.append(stage_rss(server.pid))
        mib = report["stage_rss_mib"] = [round(x / (1 << 20)) for x in rss]
        print(f"thinker RSS over {args.distinct} distinct grammars (MiB): {mib}")
    finally:
        server.terminate()
        server.wait(60)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
