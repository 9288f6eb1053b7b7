"""The ``diffusion`` stage kind: a denoising loop over a torch model, in its own process.

One engine step advances every running sample by one denoising step, so an abort lands between
steps (and is a whole-sample retry: no partial image). ``preview_every: k`` streams a preview
image every k steps; per request, ``extra={"diffusion": {"steps": n, "preview_every": k}}``.
A prompt may carry several weighted conditionings —
``{"conditionings": [{"tokens": [...], "weight": w}, ...]}`` — whose noise predictions are
combined as sum(w_i * eps_i): the generic seam guidance plugins fill. A plain token list is one
conditioning of weight 1 (unguided).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from omni_core.kinds.vllm_kind import engine_process_client
from omni_core.kinds.worker_base import TorchStageEngine
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageContext
from omni_core.stage.process import ProcessStageClient
from omni_core.stage.worker import error_output


class DiffusionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="tiny-denoiser", description="a demo model name or a path")
    steps: int = Field(default=20, ge=1, description="denoising steps per sample")
    preview_every: int | None = Field(
        default=None, ge=1, description="stream a preview image every k steps (unset: none)"
    )
    threads: int = Field(default=1, ge=1, description="torch threads of this replica")
    seed: int = Field(default=0, description="noise seed when a request gives none")
    output: str = Field(
        default="whole",
        description="output mode: `whole` (an abort retries the whole sample) or `ar`",
    )


class DiffusionOptions(BaseModel):
    """A request's ``extra["diffusion"]`` (a pydantic ValidationError is a ValueError: 400)."""

    model_config = ConfigDict(extra="forbid")

    steps: int | None = Field(default=None, ge=1)
    preview_every: int | None = Field(default=None, ge=0, description="0: no previews")


class Conditioning(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[int]
    weight: float = Field(default=1.0, allow_inf_nan=False)


_CONDITIONINGS = TypeAdapter(list[Conditioning])


def make_diffusion_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    from omni_core.models import resolve_model

    args = DiffusionArgs.model_validate(stage.engine_args)
    config = {
        "factory": "omni_core.kinds.diffusion:build",
        "model": resolve_model(args.model, context.settings.cache_dir),
        "args": args.model_dump(),
    }
    return engine_process_client(stage, replica, context, config, args.threads)


class DiffusionEngine(TorchStageEngine):
    kind = "diffusion"

    def __init__(self, config: dict[str, Any]) -> None:
        import json
        from pathlib import Path

        import torch
        from safetensors.torch import load_file

        from omni_core.stage.dataplane import default_plane

        self.args = DiffusionArgs.model_validate(config["args"])
        torch.set_num_threads(self.args.threads)
        self.torch = torch
        model = Path(config["model"])
        self.spec = json.loads((model / "config.json").read_text())
        self.w = load_file(str(model / "model.safetensors"))
        self.plane = default_plane()
        self.samples: dict[str, dict[str, Any]] = {}

    def add(self, request: Any) -> None:
        torch = self.torch
        options = DiffusionOptions.model_validate(request.params.extra.get("diffusion", {}))
        steps = options.steps or self.args.steps
        seed = request.params.seed if request.params.seed is not None else self.args.seed
        gen = torch.Generator().manual_seed(int(seed))
        conds = [(self.embed(c.tokens), c.weight) for c in _conditionings(request.prompt)]
        latent = torch.randn(*self.spec["latent"], generator=gen)
        preview = options.preview_every
        if preview is None:
            preview = self.args.preview_every
        self.samples[request.request_id] = {
            "x": latent,
            "k": 0,
            "steps": steps,
            "conds": conds,
            "preview": preview or None,
        }

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError("a diffusion stage takes its whole input at once")

    def embed(self, tokens: list[int]) -> Any:
        idx = self.torch.tensor([t % self.spec["vocab"] for t in tokens] or [0])
        return self.w["embed"][idx].mean(dim=0)

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.samples.pop(rid, None)

    def has_work(self) -> bool:
        return bool(self.samples)

    def eps(self, x: Any, cond: Any, t: float) -> Any:
        torch = self.torch
        inp = torch.cat([x.flatten(), cond, torch.tensor([t])])
        hidden = torch.relu(self.w["w1"] @ inp)
        return torch.tanh(self.w["w2"] @ hidden).reshape(x.shape)

    def step(self) -> list[StageOutput]:
        outputs = []
        for rid, s in list(self.samples.items()):
            try:
                out = self._step_one(rid, s)
            except Exception as exc:  # this request's own failure: it ends, the others go on
                del self.samples[rid]
                outputs.append(error_output(rid, exc))
                continue
            if out is not None:
                outputs.append(out)
                if out.finished:
                    del self.samples[rid]
        return outputs

    def _step_one(self, rid: str, s: dict[str, Any]) -> StageOutput | None:
        """One denoising step of one sample; its image when done or at a preview."""
        from omni_core.media import Image

        t = 1.0 - s["k"] / s["steps"]
        eps = sum(w * self.eps(s["x"], c, t) for c, w in s["conds"])
        s["x"] = s["x"] - eps * (2.0 / s["steps"])
        s["k"] += 1
        done = s["k"] >= s["steps"]
        preview = s["preview"] and s["k"] % s["preview"] == 0
        if not (done or preview):
            return None
        return StageOutput(
            request_id=rid,
            payload=Image(self.plane.put(self.to_image(s["x"]))),
            finished=done,
            finish_reason="stop" if done else None,
        )

    def to_image(self, x: Any) -> Any:
        up = self.spec["upscale"]
        pixels = (self.torch.sigmoid(x) * 255).round().to(self.torch.uint8)
        pixels = pixels.repeat_interleave(up, dim=1).repeat_interleave(up, dim=2)
        return pixels.permute(1, 2, 0).contiguous().numpy()


def _conditionings(prompt: Any) -> list[Conditioning]:
    if isinstance(prompt, dict) and "conditionings" in prompt:
        return _CONDITIONINGS.validate_python(prompt["conditionings"])
    if isinstance(prompt, list):
        return [Conditioning(tokens=prompt)]
    return [Conditioning(tokens=list(str(prompt).encode()))]


def build(config: dict[str, Any]) -> DiffusionEngine:
    return DiffusionEngine(config)
