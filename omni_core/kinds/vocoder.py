"""The ``vocoder`` stage kind: codec tokens → audio, chunk by chunk, in its own process.

Each input chunk (a ``stream`` edge delivers them as the talker produces them) becomes one
:class:`~omni_core.media.AudioChunk` output; the array travels through the shared-memory data
plane. The request finishes once its input is closed and every chunk is voiced.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from omni_core.kinds.vllm_kind import engine_process_client
from omni_core.kinds.worker_base import TorchStageEngine
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageContext
from omni_core.stage.process import ProcessStageClient
from omni_core.stage.worker import error_output


class VocoderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="tiny-vocoder", description="a demo model name or a path")
    threads: int = Field(default=1, ge=1, description="torch threads of this replica")


def make_vocoder_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    args = VocoderArgs.model_validate(stage.engine_args)
    config = {
        "factory": "omni_core.kinds.vocoder:build",
        "model": context.resolve_model(args.model),
        "threads": args.threads,
    }
    return engine_process_client(stage, replica, context, config, args.threads)


class VocoderEngine(TorchStageEngine):
    kind = "vocoder"

    def __init__(self, config: dict[str, Any]) -> None:
        import json
        from pathlib import Path

        import torch
        from safetensors.torch import load_file

        from omni_core.stage.dataplane import default_plane

        torch.set_num_threads(config["threads"])
        self.torch = torch
        model = Path(config["model"])
        self.spec = json.loads((model / "config.json").read_text())
        weights = load_file(str(model / "model.safetensors"))
        self.freqs, self.amps = weights["freqs"], weights["amps"]
        self.plane = default_plane()
        self.requests: dict[str, dict[str, Any]] = {}

    def add(self, request: Any) -> None:
        self.requests[request.request_id] = {
            "chunks": deque([_codes(request.prompt)]),
            "closed": not request.streaming_input,
            "samples": 0,
        }

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.requests.get(request_id)
        if state is None:
            return
        codes = _codes(prompt)
        if codes:
            state["chunks"].append(codes)
        state["closed"] = state["closed"] or final

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def has_work(self) -> bool:
        return any(s["chunks"] or s["closed"] for s in self.requests.values())

    def step(self) -> list[StageOutput]:
        outputs = []
        for rid, state in list(self.requests.items()):
            try:
                out = self._step_one(rid, state)
            except Exception as exc:  # this request's own failure: it ends, the others go on
                del self.requests[rid]
                outputs.append(error_output(rid, exc))
                continue
            if out is None:
                continue
            outputs.append(out)
            if out.finished:
                del self.requests[rid]
        return outputs

    def _step_one(self, rid: str, state: dict[str, Any]) -> StageOutput | None:
        from omni_core.media import AudioChunk

        if state["chunks"]:
            codes = state["chunks"].popleft()
            audio = self.voice(codes, state["samples"])
            state["samples"] += len(audio)
            last = state["closed"] and not state["chunks"]
            return StageOutput(
                request_id=rid,
                token_ids=codes,
                finished=last,
                finish_reason="stop" if last else None,
                payload=AudioChunk(self.plane.put(audio), self.spec["sample_rate"]),
            )
        if state["closed"]:
            return StageOutput(request_id=rid, finished=True, finish_reason="stop")
        return None

    def voice(self, codes: list[int], offset: int) -> Any:
        torch = self.torch
        hop, rate = self.spec["hop"], self.spec["sample_rate"]
        idx = torch.tensor([c % self.spec["codebook"] for c in codes], dtype=torch.long)
        n = torch.arange(offset, offset + hop * len(codes), dtype=torch.float64) / rate
        freqs = self.freqs[idx].repeat_interleave(hop, dim=0).double()  # (samples, harmonics)
        amps = self.amps[idx].repeat_interleave(hop, dim=0).double()
        wave = (amps * torch.sin(2 * math.pi * freqs * n[:, None])).sum(dim=1)
        return wave.clamp(-1, 1).to(torch.float32).numpy()


def _codes(prompt: Any) -> list[int]:
    if isinstance(prompt, list):
        return [int(t) for t in prompt]
    if isinstance(prompt, str):
        return list(prompt.encode())
    return []


def build(config: dict[str, Any]) -> VocoderEngine:
    return VocoderEngine(config)
