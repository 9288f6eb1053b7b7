"""The UMT5 prompt encoder: a ``torch`` stage engine (``engine_args.engine:
"omni_wan.encoder:build"``). vLLM 0.32 has no T5/UMT5 model, and a prompt is one encoder
forward, so it runs on the torch kind. Each request's text becomes ``WanPipeline``'s
``prompt_embeds`` (cleaned as the pipeline cleans it, padded with zeros to
``max_sequence_length``), emitted as one ``final`` hidden-states chunk."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omni_core import RequestError, StageOutput
from omni_core.extend import HiddenStates, TorchStageEngine, error_output

logger = logging.getLogger(__name__)

MAX_SEQUENCE_LENGTH = 512  # WanPipeline.__call__'s default max_sequence_length


class EncoderEngine(TorchStageEngine):
    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from diffusers import WanPipeline

        from omni_wan.load import load_text

        torch.set_num_threads(int(config.get("threads") or 1))
        options = config.get("options") or {}
        self.max_length = int(options.get("max_sequence_length", MAX_SEQUENCE_LENGTH))
        self.torch = torch
        text = load_text(Path(config["model"]))
        self.pipe: Any = WanPipeline(vae=None, scheduler=None, **text)
        self.pending: list[tuple[str, str]] = []

    def add(self, request: Any) -> None:
        prompt = request.prompt
        if isinstance(prompt, dict):
            prompt = prompt.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError(
                f"the Wan encoder takes a text prompt, not {type(prompt).__name__}", param="prompt"
            )
        self.pending.append((request.request_id, prompt))

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise NotImplementedError("the Wan encoder takes its whole prompt at once")

    def abort(self, request_ids: list[str]) -> None:
        gone = set(request_ids)
        self.pending = [p for p in self.pending if p[0] not in gone]

    def has_work(self) -> bool:
        return bool(self.pending)

    def step(self) -> list[StageOutput]:
        """One forward per prompt (as the pipeline encodes each prompt: no padding differences)."""
        outputs = []
        pending, self.pending = self.pending, []
        with self.torch.no_grad():
            for rid, text in pending:
                try:
                    embeds = self.pipe._get_t5_prompt_embeds(
                        text, max_sequence_length=self.max_length, device=self.torch.device("cpu")
                    )[0]
                except Exception as exc:  # this request's own failure: the others go on
                    outputs.append(error_output(rid, exc))
                    continue
                states = HiddenStates(start=0, layers={"final": embeds.float().numpy()})
                outputs.append(
                    StageOutput(
                        request_id=rid, hidden_states=states, finished=True, finish_reason="stop"
                    )
                )
        return outputs


def build(config: dict[str, Any]) -> EncoderEngine:
    return EncoderEngine(config)
