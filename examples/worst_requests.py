"""What the worst legal request of each kind costs ``omni serve`` (issue 24's "Must show").

Starts ``omni serve PIPELINE`` (default ``qwen2.5-omni``; the tiny checkpoint is built on first
use in ``$OMNI_CACHE_DIR``) on a free loopback port and sends, one at a time: the longest legal
audio part (``OMNI_MAX_AUDIO_SECONDS`` of 16-bit WAV at 8 kHz, resampled to 16 kHz, or what fits
the body limit), the largest legal image (a solid RGB PNG of ``OMNI_MAX_IMAGE_PIXELS``), the
longest legal prompt (``OMNI_MAX_PROMPT_CHARS``; refused later for ``max_model_len``), then the
issue's attacks, now illegal: a 1 Hz WAV (2.9 KB), a 9000 x 9000 PNG (13 KB), a 15 MiB prompt.

For each: HTTP status, wall time, the RSS of the server's process tree (server and stage
processes, from ``/proc/<pid>/status``) retained after the request and at its peak (``VmHWM``,
reset through ``/proc/<pid>/clear_refs`` first), and ``/health``'s latency p50 / max, sampled
every 20 ms on a second connection while the request is in flight. Linux only.
``python examples/worst_requests.py [--pipeline NAME] [--repeat N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

MIB = 1 << 20


def wav(rate: int, samples: int) -> bytes:
    """A 16-bit mono PCM WAV of ``samples`` samples (a slow ramp) declaring ``rate`` Hz."""
    data = bytes(range(256)) * (samples * 2 // 256) + b"\0" * (samples * 2 % 256)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data


def png(width: int, height: int, rgb: bool = True) -> bytes:
    """A solid PNG (RGB, or 1-bit gray when ``rgb`` is false): a few KB whatever its size."""
    stride = width * 3 if rgb else (width + 7) // 8
    packer = zlib.compressobj(9)
    row = b"\0" + (b"\x80" if rgb else b"\0") * stride
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8 if rgb else 1, 2 if rgb else 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def chat(*parts: dict[str, Any], text: str = "hi") -> dict[str, Any]:
    """A chat body: one user message, its media ``parts`` then ``text``."""
    content = [*parts, {"type": "text", "text": text}]
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4}


def audio(raw: bytes) -> dict[str, Any]:
    data = base64.b64encode(raw).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def image(raw: bytes) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(raw).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def cases(settings: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, body) of each worst request, legal ones just within ``settings``' budgets."""
    room = settings.max_body_bytes - 4096  # the JSON around the part
    seconds = min(settings.max_audio_seconds, (room * 3 // 4 - 44) // (2 * 8000))
    side = int(settings.max_image_pixels**0.5)
    text = "word " * (settings.max_prompt_chars // 5)
    return [
        ("warm-up: 'hi'", chat()),
        (f"audio {seconds:g} s at 8 kHz", chat(audio(wav(8000, int(seconds * 8000))))),
        (f"image {side}x{side} RGB PNG", chat(image(png(side, side)))),
        (f"prompt {len(text):,} chars", chat(text=text)),
        ("illegal: 1 Hz WAV", chat(audio(wav(1, 1430)))),
        ("illegal: 9000x9000 PNG", chat(image(png(9000, 9000, rgb=False)))),
        ("illegal: 15 MiB prompt", chat(text="x" * (15 * MIB))),
    ]


def tree(root: int) -> list[int]:
    """``root`` and its descendants, from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def memory(pids: list[int]) -> dict[int, tuple[int, int]]:
    """(VmRSS, VmHWM) in bytes of each of ``pids`` still alive."""
    found = {}
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        kib = {x[:5]: int(x.split()[1]) for x in lines if x.startswith(("VmRSS", "VmHWM"))}
        found[pid] = (kib.get("VmRSS", 0) * 1024, kib.get("VmHWM", 0) * 1024)
    return found


def label(pid: int, root: int) -> str:
    """ "server", a stage process's stage name, or the process's name."""
    if pid == root:
        return "server"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_text()
        name = re.search(r'"(?:stage_name|stage|name)": "([^"]+)"', cmdline)
        return name.group(1) if name else Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return str(pid)


def reset_peaks(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(pipeline: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "omni_core.cli", "serve", pipeline, "--port", str(port)]
    env = {"OMNI_STARTUP_TIMEOUT_S": "900", **os.environ}  # a loaded machine starts slowly
    server = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"omni serve exited {server.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        time.sleep(1)
    server.terminate()
    raise SystemExit(f"omni serve not healthy within 900 s; see {log}")


def measure(base: str, root: int, body: dict[str, Any] | None, log: Path) -> dict[str, Any]:
    logged = log.stat().st_size
    pids = tree(root)
    reset_peaks(pids)
    before = memory(pids)
    labels = {pid: label(pid, root) for pid in pids}
    done = threading.Event()
    health: list[float] = []

    def sample() -> None:
        with httpx.Client(base_url=base, timeout=30) as client:
            client.get("/health")  # the connection is open: what follows times the route
            while not done.is_set():
                begin = time.monotonic()
                client.get("/health")
                took = time.monotonic() - begin
                health.append(took)
                done.wait(max(0.0, 0.02 - took))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(0.1)
    payload = json.dumps(body).encode() if body else b""
    begin = time.monotonic()
    if body is None:  # the baseline: /health alone, 2 s
        time.sleep(2)
        response = httpx.Response(200)
    else:
        headers = {"content-type": "application/json"}
        response = httpx.post(
            f"{base}/v1/chat/completions", content=payload, headers=headers, timeout=600
        )
    wall = time.monotonic() - begin
    done.set()
    sampler.join(60)
    after = memory(tree(root))
    time.sleep(0.2)  # the watchdog's last line
    with log.open("rb") as lines:
        lines.seek(logged)
        found = re.findall(
            r"blocked \((\d+) ms.*?, at \S*?([\w.]+:\d+ in \w+)", lines.read().decode()
        )
    rss_before = sum(rss for rss, _ in before.values())
    growth = {p: hwm - before.get(p, (0, 0))[0] for p, (_, hwm) in after.items()}
    top = max(growth, key=growth.__getitem__)
    error = response.json().get("error", {}) if response.status_code >= 400 else {}
    return {
        "status": response.status_code,
        "body_bytes": len(payload),
        "wall_s": round(wall, 3),
        "rss_retained_mib": round((sum(r for r, _ in after.values()) - rss_before) / MIB, 1),
        "rss_peak_mib": round((sum(h for _, h in after.values()) - rss_before) / MIB, 1),
        "peak_most": f"{labels.get(top, label(top, root))} +{growth[top] / MIB:.0f} MiB",
        "health_p50_ms": round(statistics.median(health or [0]) * 1000, 1),
        "health_max_ms": round(max(health or [0]) * 1000, 1),
        "health_samples": len(health),
        "error": str(error.get("message", ""))[:160],
        "loop_blocked": [f"{ms} ms at {where}" for ms, where in found],
    }


def main(argv: list[str] | None = None) -> int:
    from omni_core.config.settings import OmniSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default="qwen2.5-omni")
    parser.add_argument("--repeat", type=int, default=1, help="send each request N times")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--log", type=Path, default=Path("worst_requests.server.log"))
    args = parser.parse_args(argv)
    port = free_port()
    server = start(args.pipeline, port, args.log)
    results = []
    try:
        model = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"]
        todo: list[tuple[str, Any]] = [("idle (no request)", None)]
        for name, body in cases(OmniSettings()):
            body["model"] = model
            todo += [
                (f"{name} #{i + 1}" if args.repeat > 1 else name, body) for i in range(args.repeat)
            ]
        for name, body in todo:
            row = {"case": name, **measure(f"http://127.0.0.1:{port}", server.pid, body, args.log)}
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.terminate()
        server.wait(60)
    print("\n| request | body | status | wall | RSS retained / peak (most: where) |", end="")
    print(" /health p50 / max (n) |\n|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['case']} | {r['body_bytes'] / MIB:.2f} MiB | {r['status']} "
            f"| {r['wall_s']:.2f} s "
            f"| {r['rss_retained_mib']:+.0f} / {r['rss_peak_mib']:+.0f} MiB ({r['peak_most']}) "
            f"| {r['health_p50_ms']} / {r['health_max_ms']} ms ({r['health_samples']}) |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
