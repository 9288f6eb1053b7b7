"""Qwen3-Omni's talker + code predictor as a stage engine: thinker rows → codec frames.

``build(config)`` is the factory the core's ``torch`` stage kind calls in the stage process
(``config``: ``{"model": <checkpoint dir or hub id>, "threads": n, "options": {...}}``). It loads
transformers' ``Qwen3OmniMoeTalkerForConditionalGeneration`` (its ``talker.*`` weights, code
predictor included) and the three rows of the thinker's embedding table the talker reads (the tts
bos, eos and pad tokens).

**What the talker consumes** (``Qwen3OmniMoeForConditionalGeneration.generate``, batch of one):
with the thinker's rows ``emb`` (layer-0 embeddings) and ``hid`` (``hidden_states[accept]``):

* prefill: every row of the prompt's user turns (system turns dropped): ``hidden_projection(hid)``
  at audio/image/video placeholders, ``text_projection(emb)`` elsewhere; then 9 assistant rows:
  ``text_projection(emb)`` of ``<|im_start|>assistant\\n``, 4 tts pad, tts bos, the first reply
  token, plus codec embeddings ``[0, 0, 0, nothink, think_bos, think_eos, speaker, pad, bos]``;
  3D rope positions from the talker's ``get_rope_index`` over the user ids and 9 tts pads;
* per frame: the talker's first code, then the code predictor's ``num_code_groups - 1`` residual
  codes (a fresh 2-row prefill ``[talker last hidden, codec_embedding(code0)]``, then one group
  per step); the next talker input is the sum of the frame's code embeddings plus trailing text
  row j: ``text_projection(emb)`` of reply token j + 1, the tts eos after the reply, tts pad after
  that (a reply going on past the thinker's eos: transformers' per-row rewrite).

Talker step j needs the row of reply token j + 1, which the thinker emits with token j + 2: on a
``stream`` edge the talker follows the thinker two tokens behind. A one-token reply gives no
codes (transformers has no first text row for it).

**Input** (what :mod:`omni_qwen3.bridge` makes of the thinker's outputs): a dict with
``token_ids`` (new reply tokens), ``start`` plus ``embeddings`` and ``hidden`` (float32
``[rows, hidden]`` for positions ``start ..``) and, in the first chunk, ``prompt_ids`` and
``image_sizes``.

**Sampling**: the talker stage's ``temperature`` (0: greedy, talker and code predictor alike),
``top_k``, ``top_p``, ``repetition_penalty`` (over the first codes so far) and ``seed`` (one
generator per request, drawn in transformers' order: the same as ``torch.manual_seed(seed)``
before ``generate``); sampling the code predictor uses transformers' top-k 50 / top-p 0.8.
``max_tokens`` counts frames: transformers' ``talker_max_new_tokens`` is ``max_tokens + 1`` (its
last first-code never gets residual codes). ``params.extra["voice"]``: a speaker of the config's
``talker_config.speaker_id`` (case-insensitive; default ``options.voice``).

**Batching**: one step per engine step for every request that can step; prefills run one
forward each, decode rows of concurrent requests share one talker forward (up to
``options.max_batch``; 1: a forward each) and their frames one code-predictor forward per code
group (:mod:`omni_qwen3.talker_batch`); codes are each request's alone up to float rounding.

**Output**: ``token_ids`` are frames flattened group-major within a frame (``num_code_groups``
ints per frame), the codec eos not included; ``finish_reason`` ``stop`` or ``length``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_core.family import ImageGrid, generation_config, local_checkpoint, read_rows
from omni_core.family import token_ids as id_set
from omni_qwen3.talker_batch import decode_batch, first_code, predict_batch, warpers
from omni_qwen3.weights import load_part

logger = logging.getLogger(__name__)

DEFAULT_VOICE = "Ethan"  # generate()'s default speaker
THINKER_EMBEDDINGS = "thinker.model.embed_tokens.weight"


class TalkerOptions(BaseModel):
    """``engine_args.options`` of a Qwen3-Omni talker stage."""

    model_config = ConfigDict(extra="forbid")

    voice: str = Field(default=DEFAULT_VOICE, description="speaker when a request names none")
    max_tokens: int = Field(default=4096, ge=1, description="frames per request when unset")
    max_batch: int = Field(
        default=64,
        ge=1,
        description="decode steps of concurrent requests in one forward (1: a forward each)",
    )


@dataclass
class _Request:
    rid: str
    speaker: int
    max_tokens: int
    greedy: bool
    processors: list[Any]
    generator: Any
    stream: bool
    prompt_ids: list[int] = field(default_factory=list)
    image_sizes: list[tuple[int, int]] = field(default_factory=list)
    emb: list[Any] = field(default_factory=list)  # thinker rows per position
    hid: list[Any] = field(default_factory=list)
    reply: list[int] = field(default_factory=list)
    eos: int | None = None  # index in the reply of the thinker's first eos token
    done: bool = False
    assistant: int = -1  # position of the last <|im_start|>assistant
    cache: Any = None
    past: int = 0
    rope_delta: int = 0
    first: list[int] = field(default_factory=list)  # the talker's first codes so far
    pending: Any = None  # the next talker input (frame embeddings), without its text row
    held: list[int] = field(default_factory=list)


class TalkerEngine(TorchStageEngine):
    kind = "qwen3-omni talker"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeTalkerForConditionalGeneration

        try:
            self.options = TalkerOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError([f"talker options: {exc}"]) from None
        if not config.get("model"):
            raise ConfigError(["the talker needs engine_args.model (a Qwen3-Omni checkpoint)"])
        started = time.perf_counter()
        self.torch = torch
        checkpoint = local_checkpoint(str(config["model"]))
        omni = Qwen3OmniMoeConfig.from_pretrained(checkpoint)
        # transformers' talker get_rope_index reads config.audio_config.n_window for a prompt
        # with audio and an image (or video); the talker's config has none: the thinker's
        omni.talker_config.audio_config = omni.thinker_config.audio_config
        talker = Qwen3OmniMoeTalkerForConditionalGeneration._from_config(
            omni.talker_config, dtype=torch.float32
        )
        load_part(talker, checkpoint, "talker.")
        self.talker = talker.eval()
        tc = omni.talker_config
        self.groups = int(tc.num_code_groups)
        self.codec_eos = int(tc.codec_eos_token_id)
        vocab = int(tc.text_config.vocab_size)
        self.suppressed = [i for i in range(vocab - 1024, vocab) if i != self.codec_eos]
        self.voices = {str(k).lower(): int(v) for k, v in (tc.speaker_id or {}).items()}
        if self.options.voice.lower() not in self.voices:
            raise ConfigError([self.unknown_voice(self.options.voice)])
        self.codec_prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
        self.codec_pad, self.codec_bos = int(tc.codec_pad_id), int(tc.codec_bos_id)
        self.multimodal = {int(tc.audio_token_id), int(tc.image_token_id), int(tc.video_token_id)}
        self.image_token = int(tc.image_token_id)
        self.audio_start = int(tc.audio_start_token_id)
        self.audio_token = int(tc.audio_token_id)
        self.n_window = int(omni.thinker_config.audio_config.n_window)
        self.im_start, self.user = int(omni.im_start_token_id), int(omni.user_token_id)
        self.assistant_id, self.tts_pad_id = (
            int(omni.assistant_token_id),
            int(omni.tts_pad_token_id),
        )
        tts = [int(omni.tts_bos_token_id), int(omni.tts_eos_token_id), int(omni.tts_pad_token_id)]
        rows = read_rows(checkpoint, THINKER_EMBEDDINGS, tts)
        with torch.inference_mode():
            projected = self.talker.text_projection(torch.stack([rows[i].float() for i in tts]))
        self.tts_bos, self.tts_eos, self.tts_pad = projected
        self.thinker_eos = id_set(generation_config(checkpoint).get("eos_token_id"))
        if not self.thinker_eos:
            self.thinker_eos = frozenset({int(omni.im_end_token_id)})
        self.image_grid = ImageGrid(checkpoint)
        # left-padded batch caches assume full attention (a sliding layer's cache is cut)
        layer_types = getattr(tc.text_config, "layer_types", None) or ["full_attention"]
        self.batch = self.options.max_batch if set(layer_types) == {"full_attention"} else 1
        self.forwards = {"talker": 0, "predictor": 0}  # forwards run (tests, the bench)
        self.requests: dict[str, _Request] = {}
        logger.info("talker loaded from %s in %.1f s", checkpoint, time.perf_counter() - started)

    def unknown_voice(self, voice: Any) -> str:
        return f"unknown voice {voice!r}: this model has {', '.join(sorted(self.voices))}"

    # --- commands -------------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        params = request.params
        voice = params.extra.get("voice", self.options.voice)
        if not isinstance(voice, str) or voice.lower() not in self.voices:
            raise RequestError(self.unknown_voice(voice), param="voice")
        greedy = params.temperature == 0.0
        generator = None
        if not greedy:
            generator = self.torch.Generator()
            if params.seed is not None:
                generator.manual_seed(params.seed)
            else:
                generator.seed()
        state = _Request(
            rid=request.request_id,
            speaker=self.voices[voice.lower()],
            max_tokens=params.max_tokens or self.options.max_tokens,
            greedy=greedy,
            processors=self._processors(params, greedy),
            generator=generator,
            stream=request.stream_outputs,
        )
        self._feed(state, request.prompt, first=True)
        state.done = not request.streaming_input
        self.requests[request.request_id] = state

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.requests.get(request_id)
        if state is None:
            return
        if prompt:
            self._feed(state, prompt, first=False)
        state.done = state.done or final

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def _processors(self, params: Any, greedy: bool) -> list[Any]:
        """transformers' talker logits processors, in ``generate``'s order."""
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

    def _feed(self, state: _Request, chunk: Any, first: bool) -> None:
        """Take one chunk of the thinker's output (the bridge's dict)."""
        if not isinstance(chunk, dict):
            raise RequestError(
                "the talker takes the thinker's states (the 'qwen3-omni-talker' bridge's dict), "
                f"not {type(chunk).__name__}"
            )
        torch = self.torch
        if first:
            ids = [int(t) for t in chunk.get("prompt_ids") or ()]
            if not ids:
                raise RequestError("the talker's first input lacks the thinker's prompt_ids")
            state.prompt_ids = ids
            state.image_sizes = [(int(h), int(w)) for h, w in chunk.get("image_sizes") or ()]
            starts = [
                i
                for i in range(len(ids) - 1)
                if ids[i] == self.im_start and ids[i + 1] == self.assistant_id
            ]
            if not starts:
                raise RequestError("the thinker's prompt has no '<|im_start|>assistant' turn")
            state.assistant = starts[-1]
        for token in chunk.get("token_ids") or ():
            if state.eos is None and int(token) in self.thinker_eos:
                state.eos = len(state.reply)
            state.reply.append(int(token))
        if chunk.get("embeddings") is None:
            return
        start = int(chunk.get("start", 0))
        if start != len(state.emb):
            raise RequestError(
                f"thinker states for positions from {start}, expected {len(state.emb)}"
            )
        emb = torch.as_tensor(chunk["embeddings"]).float()
        hid = torch.as_tensor(chunk["hidden"]).float()
        if emb.shape != hid.shape or emb.ndim != 2:
            raise RequestError(
                f"thinker states of shapes {tuple(emb.shape)} and {tuple(hid.shape)}"
            )
        state.emb.extend(emb)
        state.hid.extend(hid)

    # --- what the next step reads ---------------------------------------------------------------
    def text_row(self, state: _Request, j: int) -> tuple[str, int] | None:
        """What trailing text row j is: ``("row", position)``, ``("eos", 0)``, ``("pad", 0)``,
        or None (wait for the thinker). As transformers: row j is reply token j + 1's; after the
        reply's last row the tts eos, then tts pads; a reply going on past the thinker's eos
        token (``ignore_eos``) gets the tts eos at j = that eos's index, pads after it."""
        row = state.assistant + 4 + j
        e = state.eos
        if e is not None and len(state.reply) > e + 1:  # generate()'s per-row rewrite
            if j >= e:
                return ("eos", 0) if j == e else ("pad", 0)
        elif state.done and row >= len(state.emb):
            return ("eos", 0) if row == len(state.emb) else ("pad", 0)
        if row < len(state.emb):
            return ("row", row)
        if state.done:
            raise RequestError(
                f"the thinker's states end at position {len(state.emb) - 1}; the talker needs "
                f"position {row}"
            )
        return None

    def ready(self, state: _Request) -> bool:
        if state.cache is None:  # the prefill needs the rows up to the first reply token
            needed = state.assistant + 4
            if len(state.emb) >= needed:
                return True
            return state.done
        return self.text_row(state, len(state.first) - 1) is not None

    def has_work(self) -> bool:
        return any(self.ready(state) for state in self.requests.values())

    def step(self) -> list[StageOutput]:
        """One talker step of every request that can step: prefills one forward each, decode
        rows batched (up to ``options.max_batch`` a forward), then the code predictor batched
        over every request that got a first code (one forward per code group)."""
        outputs: list[StageOutput] = []

        def fail(state: _Request, exc: Exception) -> None:  # this request ends, the others go on
            logger.debug("talker request %s failed", state.rid, exc_info=True)
            self.requests.pop(state.rid, None)
            outputs.append(error_output(state.rid, exc))

        talked: list[tuple[_Request, int, Any]] = []  # (state, first code, talker hidden)
        decoding: list[tuple[_Request, Any]] = []
        torch = self.torch
        with torch.inference_mode():
            for state in [s for s in self.requests.values() if self.ready(s)]:
                try:
                    if state.cache is not None:
                        decoding.append((state, self.decode_input(state)))
                    elif len(state.emb) < state.assistant + 4:  # a one-token reply: no codes
                        outputs.append(self._finish(state, "stop"))
                        del self.requests[state.rid]
                    else:
                        talked.append((state, *self.prefill(state)))
                except Exception as exc:
                    fail(state, exc)
            for group in self._groups(decoding):
                batched = None
                if len(group) > 1:
                    try:
                        batched = decode_batch(self, group)
                    except Exception:  # each request's own forward then says what is wrong
                        logger.exception("batched talker step of %d requests", len(group))
                for i, (state, x) in enumerate(group):
                    try:
                        if batched is None:
                            talked.append((state, *self.decode(state, x)))
                        else:
                            logits, hidden = batched[i]
                            talked.append((state, first_code(self, state, logits), hidden))
                    except Exception as exc:
                        fail(state, exc)
            frames = []
            for state, code, hidden in talked:
                if code == self.codec_eos:
                    outputs.append(self._finish(state, "stop"))
                    del self.requests[state.rid]
                else:
                    state.first.append(code)
                    frames.append((state, code, hidden))
            for group in self._groups(frames):
                try:
                    predicted = predict_batch(self, group)
                except Exception as exc:
                    for state, _, _ in group:
                        fail(state, exc)
                    continue
                for (state, _, _), (frame, state.pending) in zip(group, predicted, strict=True):
                    out = self._emit(state, frame)
                    if out is not None:
                        outputs.append(out)
                        if out.finished:
                            del self.requests[state.rid]
        return outputs

    def _groups(self, items: list[Any]) -> list[list[Any]]:
        return [items[lo : lo + self.batch] for lo in range(0, len(items), self.batch)]

    def decode_input(self, state: _Request) -> Any:
        """The next talker input row of ``state``: its frame's embeddings plus text row j."""
        j = len(state.first) - 1
        kind, pos = self.text_row(state, j) or ("pad", 0)
        if kind == "row":
            row = self.talker.text_projection(state.emb[pos][None])[0]
        else:
            row = self.tts_eos if kind == "eos" else self.tts_pad
        return state.pending + row

    def _emit(self, state: _Request, frame: list[int]) -> StageOutput | None:
        if len(state.first) >= state.max_tokens:
            state.held += frame
            return self._finish(state, "length")
        if not state.stream:
            state.held += frame
            return None
        return StageOutput(request_id=state.rid, token_ids=frame)

    def _finish(self, state: _Request, reason: str) -> StageOutput:
        codes, state.held = state.held, []
        return StageOutput(
            request_id=state.rid, token_ids=codes, finished=True, finish_reason=reason
        )

    # --- the forwards ---------------------------------------------------------------------------
    def prefill_inputs(self, state: _Request) -> tuple[Any, list[int]]:
        """The prefill rows and their ids (for the rope positions)."""
        torch = self.torch
        ids, a = state.prompt_ids, state.assistant
        user_rows, user_ids, role = [], [], None
        for p, token in enumerate(ids):
            if token == self.im_start:
                role = ids[p + 1] if p + 1 < len(ids) else None
            elif p == 0:
                role = ids[1] if len(ids) > 1 else None
            if role == self.user:
                user_rows.append(p)
                user_ids.append(token)
        talker = self.talker
        rows = []
        for p in user_rows:
            if ids[p] in self.multimodal:
                rows.append(talker.hidden_projection(state.hid[p][None])[0])
            else:
                rows.append(talker.text_projection(state.emb[p][None])[0])
        head = talker.text_projection(torch.stack(state.emb[a : a + 4]))
        text = torch.cat([head[:3], self.tts_pad.expand(4, -1), self.tts_bos[None], head[3:4]])
        codec_ids = [*self.codec_prefix, state.speaker, self.codec_pad, self.codec_bos]
        codec = talker.get_input_embeddings()(torch.tensor(codec_ids))
        codec = torch.cat([torch.zeros(3, codec.shape[-1]), codec])
        x = torch.cat([torch.stack(rows) if rows else text[:0], text + codec])
        return x, user_ids + [self.tts_pad_id] * 9

    def prefill(self, state: _Request) -> tuple[int, Any]:
        from transformers import DynamicCache

        x, ids = self.prefill_inputs(state)
        state.cache = DynamicCache(config=self.talker.config.text_config)
        positions = self.positions(state, ids)
        return self._forward(state, x[None], positions)

    def decode(self, state: _Request, x: Any) -> tuple[int, Any]:
        torch = self.torch
        pos = state.past + state.rope_delta
        positions = torch.full((3, 1, 1), pos, dtype=torch.long)
        return self._forward(state, x[None, None], positions)

    def _forward(self, state: _Request, inputs: Any, positions: Any) -> tuple[int, Any]:
        torch = self.torch
        length = state.past + inputs.shape[1]
        self.forwards["talker"] += 1
        out = self.talker(
            inputs_embeds=inputs,
            attention_mask=torch.ones((1, length), dtype=torch.long),
            position_ids=positions,
            past_key_values=state.cache,
            use_cache=True,
            output_hidden_states=True,
            generation_step=0,  # only echoed back (transformers' trailing-row counter)
        )
        state.past = length
        return first_code(self, state, out.logits[:, -1]), out.hidden_states[0][-1][:, -1:]

    def positions(self, state: _Request, ids: list[int]) -> Any:
        """The talker's 3D rope positions of the prefill (and the delta that continues them)."""
        torch = self.torch
        grids = self.image_grid.grids(state.image_sizes, ids, self.image_token)
        audio = self.audio_lengths(ids)
        n = len(ids)
        if grids is None and audio is None:
            state.rope_delta = 0
            return torch.arange(n).view(1, 1, -1).expand(3, 1, -1)
        positions, delta = self.talker.get_rope_index(
            torch.tensor([ids]), grids, None, torch.ones((1, n), dtype=torch.long), False, audio
        )
        state.rope_delta = int(delta.reshape(-1)[0])
        return positions

    def audio_lengths(self, ids: list[int]) -> Any:
        """Feature lengths ``get_rope_index`` maps back to each audio's token count (it needs
        only the count)."""
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
            _get_feat_extract_output_lengths,
        )

        counts, inside = [], None
        for token in ids:
            if token == self.audio_start:
                inside = 0
            elif token == self.audio_token and inside is not None:
                inside += 1
            elif inside is not None:
                counts.append(inside)
                inside = None
        if not counts:
            return None
        lengths = []
        for count in counts:
            length = 1
            while int(_get_feat_extract_output_lengths(length, self.n_window)) < count:
                length += 1
            lengths.append(length)
        return self.torch.tensor(lengths, dtype=self.torch.long)


def build(config: dict[str, Any]) -> TalkerEngine:
    return TalkerEngine(config)
