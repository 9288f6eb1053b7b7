"""Engine of a ``wan`` stage process: Wan's DiT(s), UniPC scheduler and VAE from diffusers.

The replica loads a ``WanPipeline`` folder without its text encoder (the prompt arrives encoded,
from the encoder stage) and runs the pipeline's denoising loop itself: one denoising step per
engine step for every running sample, so an abort lands between steps (a whole-sample retry: no
partial video). Each sample has its own scheduler (UniPC is multistep: its history is per
sample); its latents come from the pipeline's ``prepare_latents`` with a generator seeded by the
request's seed, so a video equals ``WanPipeline(prompt_embeds=..., generator=
torch.Generator().manual_seed(seed))``'s.

A prompt is ``{"prompt_embeds": [L, D]}`` (unguided) or omni-cfg's weighted conditionings
``{"conditionings": [{"prompt_embeds": own, "weight": s}, ..., {"prompt_embeds": neg,
"weight": 1 - s}]}``. Two conditionings combine as the pipeline writes CFG, ``ε_neg + g (ε_own -
ε_neg)``, with ``g = s`` on the high-noise expert and, on Wan 2.2's low-noise expert
(``transformer_2``, below ``boundary_ratio``), the request's ``guidance_scale_2``; more
conditionings combine as ``Σ w_i ε_i``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_core import RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_wan.kind import WanArgs, checked_options
from omni_wan.video import Progress, Video

logger = logging.getLogger(__name__)


@dataclass
class Sample:
    latents: Any
    conds: list[tuple[Any, float]]  # (embeds [1, L, D], weight); the request's own first
    scale_2: float | None  # Wan 2.2's low-noise guidance scale (None: the conditioning weights)
    scheduler: Any
    timesteps: Any
    fps: int
    k: int = 0


class WanEngine(TorchStageEngine):
    kind = "wan"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from diffusers.utils import logging as df_logging

        from omni_core.extend import default_plane
        from omni_wan.load import pipeline

        self.args = WanArgs.model_validate(config["args"])
        self.stage = config.get("stage", "wan")
        torch.set_num_threads(self.args.threads)
        df_logging.set_verbosity_error()
        df_logging.disable_progress_bar()
        self.torch = torch
        self.pipe = pipeline(Path(config["model"]), text=False)
        dit = self.pipe.transformer or self.pipe.transformer_2
        self.text_dim = int(dit.config.text_dim)
        self.channels = int(dit.config.in_channels)
        ratio = self.pipe.config.boundary_ratio
        self.boundary = (
            None if ratio is None else ratio * self.pipe.scheduler.config.num_train_timesteps
        )
        self.plane = default_plane()
        self.samples: dict[str, Sample] = {}

    # --- requests -------------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        torch = self.torch
        params = request.params
        options, _ = checked_options(params.extra, self.args, self.stage)
        conds = self.conditionings(request.prompt)
        _check_guidance(params.extra, request.prompt)
        seed = options.seed if options.seed is not None else params.seed
        generator = torch.Generator().manual_seed(int(self.args.seed if seed is None else seed))
        latents = self.pipe.prepare_latents(
            1,
            self.channels,
            options.height,
            options.width,
            options.num_frames,
            torch.float32,
            torch.device("cpu"),
            generator,
        )
        scheduler = type(self.pipe.scheduler).from_config(self.pipe.scheduler.config)
        scheduler.set_timesteps(options.steps, device="cpu")
        scheduler.set_begin_index(0)
        self.samples[request.request_id] = Sample(
            latents,
            conds,
            options.guidance_scale_2,
            scheduler,
            scheduler.timesteps,
            options.fps or 16,
        )

    def conditionings(self, prompt: Any) -> list[tuple[Any, float]]:
        if not isinstance(prompt, dict):
            raise RequestError(
                f"a wan stage takes prompt embeddings ({{'prompt_embeds': array}}, from the "
                f"encoder stage through the 'wan-embeds' bridge), not {type(prompt).__name__}",
                param="prompt",
            )
        if "conditionings" not in prompt:
            if "prompt_embeds" not in prompt:
                raise RequestError(
                    "prompt: needs 'prompt_embeds' or 'conditionings'", param="prompt"
                )
            return [(self.embeds(prompt["prompt_embeds"], "prompt_embeds"), 1.0)]
        items = prompt["conditionings"]
        if not isinstance(items, list) or not items:
            raise RequestError("conditionings: a non-empty list", param="conditionings")
        conds = []
        for i, item in enumerate(items):
            where = f"conditionings[{i}]"
            if not isinstance(item, dict) or "prompt_embeds" not in item:
                raise RequestError(f"{where}: needs 'prompt_embeds'", param=where)
            weight = item.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise RequestError(f"{where}.weight: a number, not {weight!r}", param=where)
            conds.append((self.embeds(item["prompt_embeds"], where), float(weight)))
        return [c for i, c in enumerate(conds) if i == 0 or c[1] != 0.0]

    def embeds(self, array: Any, where: str) -> Any:
        torch = self.torch
        try:
            tensor = torch.as_tensor(array)
        except Exception as exc:
            raise RequestError(f"{where}: not an array ({exc})", param=where) from None
        if tensor.dim() == 3 and tensor.shape[0] == 1:
            tensor = tensor[0]
        if tensor.dim() != 2 or tensor.shape[1] != self.text_dim:
            raise RequestError(
                f"{where}: shape {tuple(tensor.shape)}, expected [tokens, {self.text_dim}]",
                param=where,
            )
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise RequestError(f"{where}: finite floats expected", param=where)
        return tensor.float()[None]

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError("a wan stage takes its whole input at once")

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.samples.pop(rid, None)

    def has_work(self) -> bool:
        return bool(self.samples)

    # --- stepping -------------------------------------------------------------------------------
    def expert(self, sample: Sample) -> str:
        """Which DiT denoises the sample's current step (the pipeline's boundary rule)."""
        t = sample.timesteps[sample.k]
        if self.boundary is None or t >= self.boundary:
            return "transformer"
        return "transformer_2"

    def step(self) -> list[StageOutput]:
        outputs = []
        with self.torch.no_grad():
            predictions = self.predictions()
            for rid, sample in list(self.samples.items()):
                try:
                    preds = predictions[rid]
                    if isinstance(preds, BaseException):
                        raise preds
                    outputs.append(self._step_one(rid, sample, self.guided(preds, sample)))
                except Exception as exc:  # this request's own failure: the others go on
                    del self.samples[rid]
                    outputs.append(error_output(rid, exc))
                    continue
                if outputs[-1].finished:
                    del self.samples[rid]
        return outputs

    def predictions(self) -> dict[str, Any]:
        """Every running sample's predictions for its current step, one per conditioning (or the
        exception that stopped them): rows of samples with the same latent shape and expert go
        through the DiT together, ``max_batch`` per forward; a failed batch is redone row by
        row, so a failure is pinned to its request."""
        groups: dict[tuple[Any, ...], list[tuple[str, Sample]]] = {}
        for rid, sample in self.samples.items():
            key = (tuple(sample.latents.shape), self.expert(sample))
            groups.setdefault(key, []).append((rid, sample))
        result: dict[str, Any] = {rid: [] for rid in self.samples}
        size = self.args.max_batch
        for (_, expert), members in groups.items():
            model = getattr(self.pipe, expert)
            rows = [(rid, s, embeds) for rid, s in members for embeds, _ in s.conds]
            for i in range(0, len(rows), size):
                chunk = rows[i : i + size]
                try:
                    preds = self.forward(model, chunk)
                except Exception:
                    if len(chunk) == 1:
                        raise
                    preds = []
                    for row in chunk:
                        try:
                            preds.extend(self.forward(model, [row]))
                        except Exception as exc:
                            preds.append(exc)
                for (rid, _, _), pred in zip(chunk, preds, strict=True):
                    if isinstance(pred, BaseException):
                        result[rid] = pred
                    elif isinstance(result[rid], list):
                        result[rid].append(pred)
        return result

    def forward(self, model: Any, rows: list[tuple[str, Sample, Any]]) -> list[Any]:
        torch = self.torch
        latents = torch.cat([s.latents for _, s, _ in rows])
        embeds = torch.cat([e for _, _, e in rows])
        timestep = torch.cat([s.timesteps[s.k].expand(1) for _, s, _ in rows])
        out = model(
            hidden_states=latents,
            timestep=timestep,
            encoder_hidden_states=embeds,
            attention_kwargs=None,
            return_dict=False,
        )[0]
        return list(out.split(1))

    def guided(self, preds: list[Any], sample: Sample) -> Any:
        weights = [w for _, w in sample.conds]
        if len(preds) == 1:
            return preds[0] if weights[0] == 1.0 else weights[0] * preds[0]
        if len(preds) == 2 and weights[0] + weights[1] == 1.0:
            own, neg = preds
            scale = weights[0]
            if sample.scale_2 is not None and self.expert(sample) == "transformer_2":
                scale = sample.scale_2
            return neg + scale * (own - neg)  # the pipeline's expression, term for term
        return sum(w * p for p, w in zip(preds, weights, strict=True))

    def _step_one(self, rid: str, sample: Sample, noise: Any) -> StageOutput:
        t = sample.timesteps[sample.k]
        sample.latents = sample.scheduler.step(noise, t, sample.latents, return_dict=False)[0]
        sample.k += 1
        steps = len(sample.timesteps)
        if sample.k < steps:
            return StageOutput(request_id=rid, payload=Progress(sample.k, steps))
        frames = self.decode(sample.latents)
        uint8 = (frames * 255).round().clip(0, 255).astype("uint8")
        return StageOutput(
            request_id=rid,
            payload=Video(self.plane.put(uint8), sample.fps),
            finished=True,
            finish_reason="stop",
        )

    def decode(self, latents: Any) -> Any:
        """Latents → float32 frames ``[F, H, W, 3]`` in [0, 1] (the pipeline's decode)."""
        torch, vae = self.torch, self.pipe.vae
        z = vae.config.z_dim
        x = latents.to(vae.dtype)
        mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        video = vae.decode(x / std + mean, return_dict=False)[0]
        frames = self.pipe.video_processor.postprocess_video(video, output_type="np")[0]
        return frames.astype("float32")


def _check_guidance(extra: dict[str, Any], prompt: Any) -> None:
    """Guidance asked for (``extra["cfg"]``) but no conditionings arrived: omni-cfg is missing,
    disabled, or does not guide this pipeline."""
    cfg = extra.get("cfg")
    if cfg is None or (isinstance(cfg, dict) and cfg.get("enabled") is False):
        return
    if isinstance(prompt, dict) and "conditionings" in prompt:
        return
    raise RequestError(
        "extra['cfg']: guidance (a negative prompt, guidance_scale) needs the omni-cfg plugin "
        "guiding this pipeline; it is not installed, disabled, or this pipeline has no cfg "
        "section",
        param="cfg",
    )


def build(config: dict[str, Any]) -> WanEngine:
    return WanEngine(config)
