"""Qwen3-TTS's talker + code predictor as a ``torch``-kind stage engine: text in, codec frames out.

``build(config)`` is the factory the core's ``torch`` stage kind calls in the stage process
(``config``: ``{"model": <checkpoint dir>, "threads": n, "options": {...}}``; the tiny build's
directory holds one checkpoint per model type, ``options.model_type`` picks it).

**Request.** ``prompt``: the text to speak (a ``str``); ``params.extra``: ``voice`` (a speaker of
a custom-voice model, case-insensitive), ``instructions`` (voice design: required; custom voice:
optional), ``language`` (default ``auto``). The prefill rows are :func:`omni_qwen3_tts.model.
prefill_rows`'s, the official ``generate``'s.

**Per frame**, as the official ``generate``: the talker samples the first code; the code
predictor a fresh 2-row prefill ``[talker last hidden, codec_embedding(code0)]`` and then one row
per residual group (15 at the real size); the next talker input is the sum of the frame's 16 code
embeddings plus the ``tts_pad`` text row.

**Sampling**, as ``generate`` with the checkpoint's ``generation_config.json``: the stage's
``temperature`` (0: greedy, talker and predictor alike), ``top_k``, ``top_p`` and
``repetition_penalty`` (over the first codes so far) for the talker, the codec specials suppressed
but its eos, the eos suppressed for the first 2 codes (``min_new_tokens=2``); the predictor with
the ``subtalker_*`` values. ``seed``: one generator per request, drawn in ``generate``'s order (the
same as ``torch.manual_seed(seed)`` before it). ``max_tokens`` counts frames (``generate``'s
``max_new_tokens`` is ``max_tokens + 1``).

**Batching.** Each engine step runs every new request's prefill (a forward each), then the decode
rows of all others in **one talker forward** (their caches left-padded by the family kit's
:func:`~omni_core.family.batch_cache`, up to ``options.max_batch``), then the code predictor for
every request that got a first code, **one forward per code group** (fresh caches of equal
length: no padding). A request's codes are its batch-of-one's up to float rounding.

**Output.** ``token_ids``: frames, ``num_code_groups`` ints each (group 0 first), the eos not
included; ``finish_reason`` ``stop`` (the talker's eos) or ``length``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_core.family import batch_cache, local_checkpoint, take_rows
from omni_qwen3_tts.model import (
    Voice,
    check_voice,
    checkpoint_dir,
    load,
    prefill_rows,
    reference_codes,
    speaker_embedding,
)

logger = logging.getLogger(__name__)

MIN_NEW_TOKENS = 2  # generate() hard-codes it: no eos before the second first code


class TalkerOptions(BaseModel):
    """``engine_args.options`` of a Qwen3-TTS talker stage."""

    model_config = ConfigDict(extra="forbid")

    model_type: str = Field(default="custom_voice", description="the tiny build's subfolder")
    voice: str | None = Field(default=None, description="speaker when a request names none")
    max_tokens: int = Field(default=2048, ge=1, description="frames per request when unset")
    max_batch: int = Field(default=64, ge=1, description="decode rows per forward (1: each own)")


@dataclass
class _Request:
    rid: str
    greedy: bool
    generator: Any
    processors: list[Any]
    sub: list[Any]  # the code predictor's warpers
    sub_sample: bool  # the code predictor samples (else greedy)
    max_frames: int
    stream: bool
    rows: Any = None  # the prefill rows until the prefill ran
    trailing: Any = None  # text rows fed one per decode step, then tts_pad
    cache: Any = None
    past: int = 0
    first: list[int] = field(default_factory=list)
    pending: Any = None  # the next talker input row
    held: list[int] = field(default_factory=list)
    frames: int = 0


class TalkerEngine(TorchStageEngine):
    kind = "qwen3-tts talker"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        try:
            self.options = TalkerOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError([f"qwen3-tts talker options: {exc}"]) from None
        if not config.get("model"):
            raise ConfigError(["the qwen3-tts talker needs engine_args.model"])
        started = time.perf_counter()
        self.torch = torch
        path = checkpoint_dir(local_checkpoint(str(config["model"])), self.options.model_type)
        self.loaded = load(path)
        model = self.loaded.model
        self.talker = model.talker
        self.predictor = model.talker.code_predictor
        tc = model.config.talker_config
        self.groups = int(tc.num_code_groups)
        self.eos = int(tc.codec_eos_token_id)
        self.suppressed = [i for i in range(tc.vocab_size - 1024, tc.vocab_size) if i != self.eos]
        self.forwards = {"talker": 0, "predictor": 0}  # forwards run (tests, the bench)
        self.requests: dict[str, _Request] = {}
        logger.info(
            "qwen3-tts talker loaded from %s in %.1f s", path, time.perf_counter() - started
        )

    # --- commands -------------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        params, extra = request.params, request.params.extra
        text = request.prompt
        if isinstance(text, dict):
            text = text.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RequestError("the text to speak is empty", param="input")
        clone = self.loaded.model_type == "base"
        xvector = codes = None
        ref_text = extra.get("ref_text")
        if ref_text is not None and not isinstance(ref_text, str):
            raise RequestError("ref_text must be a string", param="ref_text")
        if clone and extra.get("ref_audio") is not None:
            audio, rate = reference_audio(extra["ref_audio"])
            with self.torch.inference_mode():
                xvector = speaker_embedding(self.loaded, audio, rate)
                if ref_text:  # ICL mode (x-vector only without a reference text)
                    codes = reference_codes(self.loaded, audio, rate)
        streaming_text = extra.get("non_streaming_mode", not clone)
        if not isinstance(streaming_text, bool):
            raise RequestError(
                "non_streaming_mode must be true or false", param="non_streaming_mode"
            )
        voice = Voice(
            speaker=None if clone else extra.get("voice") or self.options.voice,
            instruct=extra.get("instructions") or None,
            language=str(extra.get("language") or "auto"),
            xvector=xvector,
            non_streaming=streaming_text,
            ref_codes=codes,
            ref_text=ref_text or None,
        )
        check_voice(self.loaded, voice)
        greedy = params.temperature == 0.0
        generator = None
        if not greedy:
            generator = self.torch.Generator()
            if params.seed is not None:
                generator.manual_seed(params.seed)
            else:
                generator.seed()
        gen = self.loaded.generation
        sub: list[Any] = []
        sub_sample = not greedy and bool(gen.get("subtalker_dosample", True))
        if sub_sample:
            sub = warpers(
                float(gen.get("subtalker_temperature", 0.9)),
                int(gen.get("subtalker_top_k", 50)),
                float(gen.get("subtalker_top_p", 1.0)),
            )
        with self.torch.inference_mode():
            rows, trailing, self.tts_pad = prefill_rows(self.loaded, text, voice)
        self.requests[request.request_id] = _Request(
            rid=request.request_id,
            greedy=greedy,
            generator=generator,
            processors=self._processors(params, greedy),
            sub=sub,
            sub_sample=sub_sample,
            max_frames=params.max_tokens or self.options.max_tokens,
            stream=request.stream_outputs,
            rows=rows,
            trailing=trailing,
        )

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        raise RequestError("the qwen3-tts talker takes its whole text at once")

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def has_work(self) -> bool:
        return bool(self.requests)

    def _processors(self, params: Any, greedy: bool) -> list[Any]:
        from transformers.generation import (
            RepetitionPenaltyLogitsProcessor,
            SuppressTokensLogitsProcessor,
        )

        processors: list[Any] = []
        if params.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
        processors.append(SuppressTokensLogitsProcessor(self.suppressed))
        if not greedy:
            processors += warpers(params.temperature, params.top_k, params.top_p)
        return processors

    # --- the step -------------------------------------------------------------------------------
    def step(self) -> list[StageOutput]:
        """Prefills (a forward each), decode rows batched, then the code predictor batched."""
        outputs: list[StageOutput] = []
        talked: list[tuple[_Request, int, Any]] = []

        def fail(state: _Request, exc: Exception) -> None:
            logger.debug("qwen3-tts request %s failed", state.rid, exc_info=True)
            self.requests.pop(state.rid, None)
            outputs.append(error_output(state.rid, exc))

        with self.torch.inference_mode():
            decoding = []
            for state in list(self.requests.values()):
                if state.cache is None:
                    try:
                        talked.append((state, *self._prefill(state)))
                    except Exception as exc:
                        fail(state, exc)
                else:
                    decoding.append(state)
            for group in self._chunks(decoding):
                try:
                    talked += [(s, *r) for s, r in zip(group, self._decode(group), strict=True)]
                except Exception as exc:
                    for state in group:
                        fail(state, exc)
            frames = []
            for state, code, hidden in talked:
                if code == self.eos:
                    outputs.append(self._finish(state, "stop"))
                else:
                    state.first.append(code)
                    frames.append((state, code, hidden))
            for group in self._chunks(frames):
                try:
                    predicted = self._predict(group)
                except Exception as exc:
                    for state, _, _ in group:
                        fail(state, exc)
                    continue
                for (state, _, _), frame in zip(group, predicted, strict=True):
                    outputs.extend(self._emit(state, frame))
        return outputs

    def _chunks(self, items: list[Any]) -> list[list[Any]]:
        size = self.options.max_batch
        return [items[i : i + size] for i in range(0, len(items), size)]

    def _prefill(self, state: _Request) -> tuple[int, Any]:
        from transformers import DynamicCache

        torch = self.torch
        rows, state.rows = state.rows, None
        n = rows.shape[0]
        state.cache = DynamicCache(config=self.talker.config)
        self.forwards["talker"] += 1
        out = self.talker.model(
            inputs_embeds=rows[None],
            position_ids=torch.arange(n).view(1, 1, -1).expand(3, 1, -1),
            past_key_values=state.cache,
            use_cache=True,
        )
        state.past = n
        hidden = out.last_hidden_state[:, -1:]
        return self._sample(state, self.talker.codec_head(hidden)[:, -1]), hidden

    def _decode(self, group: list[_Request]) -> list[tuple[int, Any]]:
        """One decode row of each request of ``group`` in one forward."""
        torch = self.torch
        inputs = torch.stack([s.pending for s in group])[:, None]
        positions = torch.tensor([s.past for s in group]).view(1, -1, 1).expand(3, -1, -1)
        if len(group) == 1:
            cache, mask = group[0].cache, None
        else:
            cache, mask = batch_cache(torch, self.talker.config, group)
        self.forwards["talker"] += 1
        out = self.talker.model(
            inputs_embeds=inputs,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        if len(group) == 1:
            group[0].past += 1
        else:
            take_rows(group, cache)
        hidden = out.last_hidden_state[:, -1:]
        logits = self.talker.codec_head(hidden)[:, -1]
        return [
            (self._sample(s, logits[i : i + 1]), hidden[i : i + 1]) for i, s in enumerate(group)
        ]

    def _sample(self, state: _Request, logits: Any) -> int:
        torch = self.torch
        logits = logits.to(copy=True, dtype=torch.float32)
        history = torch.tensor([state.first], dtype=torch.long).reshape(1, -1)
        if len(state.first) < MIN_NEW_TOKENS:
            logits[:, self.eos] = -float("inf")
        for processor in state.processors:
            logits = processor(history, logits)
        return self._pick(state, logits)

    def _pick(self, state: _Request, logits: Any) -> int:
        torch = self.torch
        if state.greedy:
            return int(torch.argmax(logits, dim=-1))
        probs = torch.nn.functional.softmax(logits, dim=-1)
        return int(torch.multinomial(probs, num_samples=1, generator=state.generator))

    def _predict(self, group: list[tuple[_Request, int, Any]]) -> list[list[int]]:
        """The residual codes of one frame of each ``(state, code0, hidden)``, one predictor
        forward per group for all of them; sets each state's next talker input."""
        from transformers import DynamicCache

        torch = self.torch
        tables = self.predictor.get_input_embeddings()
        states = [s for s, _, _ in group]
        first = self.talker.get_input_embeddings()(torch.tensor([[c] for _, c, _ in group]))
        totals = first[:, 0]
        frames = [[c] for _, c, _ in group]
        cache = DynamicCache(config=self.predictor.config)
        kwargs: dict[str, Any] = {
            "inputs_embeds": torch.cat([torch.cat([h for _, _, h in group]), first], dim=1)
        }
        for step in range(self.groups - 1):
            self.forwards["predictor"] += 1
            out = self.predictor(
                past_key_values=cache, use_cache=True, generation_steps=step, **kwargs
            )
            logits = out.logits[:, -1].to(dtype=torch.float32)
            picked = []
            for i, state in enumerate(states):
                row = logits[i : i + 1]
                if state.sub_sample:
                    history = torch.tensor([frames[i][1:]], dtype=torch.long).reshape(1, -1)
                    for warper in state.sub:
                        row = warper(history, row)
                    probs = torch.nn.functional.softmax(row, dim=-1)
                    code = torch.multinomial(probs, num_samples=1, generator=state.generator)
                else:
                    code = torch.argmax(row, dim=-1)
                picked.append(int(code))
                frames[i].append(picked[-1])
            ids = torch.tensor([[p] for p in picked])
            totals = totals + tables[step](ids)[:, 0]
            kwargs = {"input_ids": ids}
        for i, state in enumerate(states):
            k = len(state.first) - 1  # this frame's index: generate()'s generation_step
            text = state.trailing[k] if k < state.trailing.shape[0] else self.tts_pad
            state.pending = totals[i] + text
        return frames

    def _emit(self, state: _Request, frame: list[int]) -> list[StageOutput]:
        state.frames += 1
        if state.frames >= state.max_frames:
            state.held += frame
            return [self._finish(state, "length")]
        if not state.stream:
            state.held += frame
            return []
        return [StageOutput(request_id=state.rid, token_ids=frame)]

    def _finish(self, state: _Request, reason: str) -> StageOutput:
        self.requests.pop(state.rid, None)
        codes, state.held = state.held, []
        return StageOutput(
            request_id=state.rid, token_ids=codes, finished=True, finish_reason=reason
        )


def reference_audio(value: Any) -> tuple[Any, int]:
    """``extra["ref_audio"]``: ``{"samples": [floats], "sample_rate": n}`` or a base64 audio file
    (a ``data:`` URL too; WAV/FLAC/OGG through soundfile) -> (float32 mono samples, rate)."""
    import base64
    import binascii
    import io

    import numpy as np

    if isinstance(value, dict):
        samples, rate = value.get("samples"), value.get("sample_rate")
        if not isinstance(rate, int) or rate <= 0 or not isinstance(samples, list) or not samples:
            raise RequestError("ref_audio: {samples, sample_rate} malformed", param="ref_audio")
        return np.asarray(samples, dtype=np.float32), rate
    if not isinstance(value, str) or not value:
        raise RequestError("ref_audio: base64 audio or {samples, sample_rate}", param="ref_audio")
    import soundfile

    data = value.split(",", 1)[1] if value.startswith("data:") else value
    try:
        wav, rate = soundfile.read(
            io.BytesIO(base64.b64decode(data, validate=True)), dtype="float32"
        )
    except (binascii.Error, ValueError, RuntimeError) as exc:
        raise RequestError(
            f"ref_audio: not a readable audio file: {exc}", param="ref_audio"
        ) from None
    if wav.ndim > 1:
        wav = wav.mean(axis=-1)
    return wav, int(rate)


def warpers(temperature: float, top_k: int | None, top_p: float) -> list[Any]:
    """transformers' sampling warpers in ``generate``'s order."""
    from transformers.generation import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out: list[Any] = []
    if temperature != 1.0:
        out.append(TemperatureLogitsWarper(temperature))
    if top_k:
        out.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=top_p))
    return out


def build(config: dict[str, Any]) -> TalkerEngine:
    return TalkerEngine(config)
