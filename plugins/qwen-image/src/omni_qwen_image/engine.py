"""Engine of a ``diffusers`` stage process: Qwen-Image's MMDiT, scheduler and VAE from diffusers.

The replica loads a ``QwenImagePipeline`` folder without its text encoder and tokenizer (the
prompt arrives encoded, from the upstream stage) and runs the pipeline's denoising loop itself,
one denoising step per engine step for every running sample, so an abort lands between steps (a
whole-sample retry: no partial image). Each sample has its own scheduler; its latents come from
the pipeline's ``prepare_latents`` with a generator seeded by the request's seed, so an image
equals ``QwenImagePipeline(prompt_embeds=..., generator=torch.Generator().manual_seed(seed))``.

A prompt is ``{"prompt_embeds": [L, D] array}`` (optionally ``"negative_prompt_embeds"``: true
CFG at the stage's ``true_cfg_scale``), or weighted conditionings
``{"conditionings": [{"prompt_embeds": ..., "weight": w}, ...]}`` (what omni-cfg hands over; the
first is the request's own): their predictions are combined as ``Σ w_i ε_i`` (for two,
``ε_neg + s (ε_pos - ε_neg)`` as the pipeline writes it) and rescaled to the norm of the
request's own prediction — Qwen-Image's true CFG with norm rescaling.

A ``QwenImageEditPipeline`` folder makes an edit stage: a prompt (or its first conditioning)
then carries ``"image"`` (the input, uint8 ``[H, W, 3]``), which is resized to about
``condition_area`` pixels, VAE-encoded once per request and appended to the noisy latents at every
transformer call (its prediction rows dropped), as ``QwenImageEditPipeline`` does
(:mod:`omni_qwen_image.edit`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_core import RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_qwen_image.kind import DiffusersArgs, checked_options

logger = logging.getLogger(__name__)


@dataclass
class Sample:
    latents: Any
    conds: list[tuple[Any, float]]  # (embeds [1, L, D], weight); the request's own first
    scheduler: Any
    timesteps: Any
    height: int
    width: int
    preview: int | None
    k: int = 0
    image_latents: Any = None  # an edit: the packed input images' latents [1, tokens, C]
    condition: tuple[tuple[int, int], ...] = ()  # an edit: each input's (height, width) encoded


class DiffusersEngine(TorchStageEngine):
    kind = "diffusers"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from diffusers.utils import logging as df_logging

        from omni_core.extend import default_plane
        from omni_qwen_image.edit import pipeline_class

        self.args = DiffusersArgs.model_validate(config["args"])
        self.stage = config.get("stage", "diffusers")
        torch.set_num_threads(self.args.threads)
        df_logging.set_verbosity_error()
        df_logging.disable_progress_bar()
        self.torch = torch
        self.dtype = getattr(torch, self.args.dtype)
        model = Path(config["model"])
        cls, extra, self.max_images = pipeline_class(model)
        self.pipe = cls.from_pretrained(
            str(model), text_encoder=None, tokenizer=None, dtype=self.dtype, **extra
        )
        self.pipe.set_progress_bar_config(disable=True)
        self.device = torch.device(self.args.device)
        self.pipe.to(self.device)
        self.hidden_size = int(self.pipe.transformer.config.joint_attention_dim)
        self.plane = default_plane()
        self.samples: dict[str, Sample] = {}

    # --- requests -------------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        torch = self.torch
        params = request.params
        options, height, width = checked_options(params.extra, self.args, self.stage)
        steps = options.steps or self.args.steps
        scale = _pick(options.true_cfg_scale, self.args.true_cfg_scale)
        conds = self.conditionings(request.prompt, scale)
        _check_guidance(params.extra, request.prompt)
        seed = _pick(options.seed, _pick(params.seed, self.args.seed))
        generator = torch.Generator().manual_seed(int(seed))
        channels = self.pipe.transformer.config.in_channels // 4
        images = edit_images(request.prompt)
        image_latents, condition = None, ()
        if images is not None or self.max_images != 0:
            from omni_qwen_image.edit import condition_images

            tensors, sizes = condition_images(self, images)
            condition = tuple(sizes)
            if options.height is None and options.width is None:
                height, width = sizes[-1]  # diffusers' default: the last input's condition size
            image_latents = self.image_latents(tensors, channels)
            latents, _ = self.pipe.prepare_latents(  # the noise as the edit pipelines draw it
                None, 1, channels, height, width, self.dtype, self.device, generator
            )
        else:  # drawn on the CPU (the generator's), as diffusers
            latents = self.pipe.prepare_latents(
                1, channels, height, width, self.dtype, self.device, generator
            )
        scheduler, timesteps = self.schedule(steps, latents.shape[1])
        preview = _pick(options.preview_every, self.args.preview_every)
        self.samples[request.request_id] = Sample(
            latents,
            conds,
            scheduler,
            timesteps,
            height,
            width,
            preview or None,
            image_latents=image_latents,
            condition=condition,
        )

    def image_latents(self, tensors: list[Any], channels: int) -> Any:
        """The input images' VAE latents (the distribution's mode), packed and concatenated
        along the tokens, as the edit pipelines' ``prepare_latents``."""
        pipe, parts = self.pipe, []
        for tensor in tensors:
            latents = pipe._encode_vae_image(image=tensor, generator=None)
            h, w = latents.shape[3:]
            parts.append(pipe._pack_latents(latents, 1, channels, h, w))
        return self.torch.cat(parts, dim=1)

    def conditionings(self, prompt: Any, scale: float) -> list[tuple[Any, float]]:
        """The prompt's conditionings as (embeds, weight); zero weights left out."""
        if not isinstance(prompt, dict):
            raise RequestError(
                f"a diffusers stage takes prompt embeddings ({{'prompt_embeds': array}}, e.g. "
                f"from a pooling vllm stage through the 'prompt-embeds' bridge), not "
                f"{type(prompt).__name__}",
                param="prompt",
            )
        if "conditionings" in prompt:
            items = prompt["conditionings"]
            if not isinstance(items, list) or not items:
                raise RequestError("conditionings: a non-empty list", param="conditionings")
            conds: list[tuple[Any, float]] = []
            for i, item in enumerate(items):
                where = f"conditionings[{i}]"
                if not isinstance(item, dict) or "prompt_embeds" not in item:
                    raise RequestError(
                        f"{where}: needs 'prompt_embeds' (token ids cannot condition this stage)",
                        param=where,
                    )
                weight = item.get("weight", 1.0)
                if isinstance(weight, bool) or not isinstance(weight, int | float):
                    raise RequestError(f"{where}.weight: a number, not {weight!r}", param=where)
                conds.append((self.embeds(item["prompt_embeds"], where), float(weight)))
            return [c for i, c in enumerate(conds) if i == 0 or c[1] != 0.0]
        if "prompt_embeds" not in prompt:
            raise RequestError("prompt: needs 'prompt_embeds' or 'conditionings'", param="prompt")
        conds = [(self.embeds(prompt["prompt_embeds"], "prompt_embeds"), 1.0)]
        negative = prompt.get("negative_prompt_embeds")
        if negative is not None and scale > 1:  # the pipeline's do_true_cfg
            neg = self.embeds(negative, "negative_prompt_embeds")
            conds = [(conds[0][0], scale), (neg, 1.0 - scale)]
        return conds

    def embeds(self, array: Any, where: str) -> Any:
        torch = self.torch
        try:
            tensor = torch.as_tensor(array)
        except Exception as exc:
            raise RequestError(f"{where}: not an array ({exc})", param=where) from None
        if tensor.dim() == 3 and tensor.shape[0] == 1:
            tensor = tensor[0]
        if tensor.dim() != 2 or tensor.shape[0] < 1 or tensor.shape[1] != self.hidden_size:
            raise RequestError(
                f"{where}: shape {tuple(tensor.shape)}, expected [tokens, {self.hidden_size}]",
                param=where,
            )
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise RequestError(f"{where}: finite floats expected", param=where)
        return tensor.to(self.device, self.dtype)[None]

    def schedule(self, steps: int, image_seq_len: int) -> tuple[Any, Any]:
        """A fresh scheduler with the pipeline's sigmas and resolution-dependent shift."""
        import numpy as np
        from diffusers.pipelines.qwenimage.pipeline_qwenimage import (
            calculate_shift,
            retrieve_timesteps,
        )

        scheduler = type(self.pipe.scheduler).from_config(self.pipe.scheduler.config)
        config = scheduler.config
        mu = calculate_shift(
            image_seq_len,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / steps, steps)
        timesteps, _ = retrieve_timesteps(scheduler, steps, self.device, sigmas=sigmas, mu=mu)
        scheduler.set_begin_index(0)
        return scheduler, timesteps

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError("a diffusers stage takes its whole input at once")

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.samples.pop(rid, None)

    def has_work(self) -> bool:
        return bool(self.samples)

    # --- stepping -------------------------------------------------------------------------------
    def step(self) -> list[StageOutput]:
        outputs = []
        with self.torch.no_grad():
            predictions = self.predictions()
            for rid, sample in list(self.samples.items()):
                try:
                    preds = predictions[rid]
                    if isinstance(preds, BaseException):
                        raise preds
                    out = self._step_one(rid, sample, self.guided(preds, sample))
                except Exception as exc:  # this request's own failure: it ends, the others go on
                    del self.samples[rid]
                    outputs.append(error_output(rid, exc))
                    continue
                if out is not None:
                    outputs.append(out)
                    if out.finished:
                        del self.samples[rid]
        return outputs

    def predictions(self) -> dict[str, Any]:
        """Every running sample's predictions for its current step, one per conditioning (or
        the exception that stopped them). Conditionings of samples of the same size run through
        the transformer together, ``max_batch`` rows per forward; a failed batch is redone row
        by row, so a failure is pinned to its request."""
        groups: dict[tuple[Any, ...], list[tuple[str, Sample]]] = {}
        for rid, sample in self.samples.items():
            key = (sample.height, sample.width, sample.condition)
            groups.setdefault(key, []).append((rid, sample))
        result: dict[str, Any] = {rid: [] for rid in self.samples}
        size = self.args.max_batch
        for members in groups.values():
            rows = [(rid, sample, embeds) for rid, sample in members for embeds, _ in sample.conds]
            for i in range(0, len(rows), size):
                chunk = rows[i : i + size]
                try:
                    preds = self.forward(chunk)
                except Exception:
                    if len(chunk) == 1:
                        raise
                    preds = []
                    for row in chunk:
                        try:
                            preds.extend(self.forward([row]))
                        except Exception as exc:
                            preds.append(exc)
                for (rid, _, _), pred in zip(chunk, preds, strict=True):
                    if isinstance(pred, BaseException):
                        result[rid] = pred
                    elif isinstance(result[rid], list):
                        result[rid].append(pred)
        return result

    def forward(self, rows: list[tuple[str, Sample, Any]]) -> list[Any]:
        """One transformer call for ``rows`` (samples of one size, each at its own timestep):
        texts of different lengths are padded and masked."""
        torch = self.torch
        first = rows[0][1]
        vae_scale = self.pipe.vae_scale_factor
        shapes = [(1, first.height // vae_scale // 2, first.width // vae_scale // 2)]
        for ch, cw in first.condition:
            shapes.append((1, ch // vae_scale // 2, cw // vae_scale // 2))
        lengths = [embeds.shape[1] for _, _, embeds in rows]
        longest = max(lengths)
        embeds = torch.cat(
            [torch.nn.functional.pad(e, (0, 0, 0, longest - e.shape[1])) for _, _, e in rows]
        )
        mask = None
        if min(lengths) != longest:
            mask = (
                torch.arange(longest, device=self.device)[None]
                < torch.tensor(lengths, device=self.device)[:, None]
            )
        latents = torch.cat([sample.latents for _, sample, _ in rows])
        tokens = latents.shape[1]
        if first.image_latents is not None:  # an edit: the input image's latents appended
            latents = torch.cat(
                [torch.cat([s.latents, s.image_latents], dim=1) for _, s, _ in rows]
            )
        timestep = torch.cat([s.timesteps[s.k].expand(1) for _, s, _ in rows]).to(latents.dtype)
        out = self.pipe.transformer(
            hidden_states=latents,
            timestep=timestep / 1000,
            guidance=None,
            encoder_hidden_states_mask=mask,
            encoder_hidden_states=embeds,
            img_shapes=[shapes] * len(rows),
            attention_kwargs={},
            return_dict=False,
        )[0]
        return list(out[:, :tokens].split(1))

    def guided(self, preds: list[Any], sample: Sample) -> Any:
        """The conditionings' predictions combined, rescaled to the request's own norm."""
        torch = self.torch
        weights = [w for _, w in sample.conds]
        if len(preds) == 1 and weights[0] == 1.0:
            return preds[0]
        own = preds[0]
        if len(preds) == 2 and weights[0] + weights[1] == 1.0:
            neg, scale = preds[1], weights[0]
            comb = neg + scale * (own - neg)
        else:
            comb = sum(w * p for p, w in zip(preds, weights, strict=True))
        own_norm = torch.norm(own, dim=-1, keepdim=True)
        return comb * (own_norm / torch.norm(comb, dim=-1, keepdim=True))

    def _step_one(self, rid: str, sample: Sample, noise: Any) -> StageOutput | None:
        from omni_core.extend import Image

        t = sample.timesteps[sample.k]
        sigma = sample.scheduler.sigmas[sample.scheduler.step_index or 0]
        before = sample.latents
        sample.latents = sample.scheduler.step(noise, t, before, return_dict=False)[0]
        sample.k += 1
        done = sample.k >= len(sample.timesteps)
        preview = sample.preview is not None and sample.k % sample.preview == 0
        if not (done or preview):
            return None
        latents = sample.latents if done else before - sigma * noise  # preview: x0 estimate
        pixels = self.decode(latents, sample.height, sample.width)
        uint8 = (pixels * 255).round().astype("uint8")  # as diffusers' numpy_to_pil
        return StageOutput(
            request_id=rid,
            payload=Image(self.plane.put(uint8)),
            finished=done,
            finish_reason="stop" if done else None,
        )

    def decode(self, latents: Any, height: int, width: int) -> Any:
        """Packed latents → float32 pixels [height, width, 3] in [0, 1] (the pipeline's decode)."""
        torch, pipe = self.torch, self.pipe
        vae = pipe.vae
        x = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor).to(vae.dtype)
        z = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        with torch.no_grad():
            image = vae.decode(x / std + mean, return_dict=False)[0][:, :, 0]
            pixels = pipe.image_processor.postprocess(image, output_type="np")[0]
        return pixels.astype("float32")


def _check_guidance(extra: dict[str, Any], prompt: Any) -> None:
    """Guidance asked for (``extra["cfg"]``) but no conditionings arrived: omni-cfg is not
    installed, disabled, or does not guide this pipeline."""
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


def edit_images(prompt: Any) -> list[Any] | None:
    """The input images of an edit prompt (``prompt["image"]`` or its first conditioning's: one
    or a list); None without."""
    if not isinstance(prompt, dict):
        return None
    items = prompt.get("conditionings")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        image = items[0].get("image")
    else:
        image = prompt.get("image")
    if image is None:
        return None
    return list(image) if isinstance(image, list | tuple) else [image]


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def build(config: dict[str, Any]) -> DiffusersEngine:
    return DiffusersEngine(config)
