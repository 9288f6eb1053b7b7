"""Qwen2.5-Omni's talker as a stage engine: the thinker's per-token states → codec ids.

``build(config)`` is the factory the core's ``torch`` stage kind calls in the stage process
(``config``: ``{"model": <checkpoint dir or hub id>, "threads": n, "options": {...}}``). It loads
transformers' ``Qwen2_5OmniTalkerForConditionalGeneration`` from the checkpoint (only the
``talker.*`` weights), the rows of the thinker's input embedding table the talker needs (each
speaker's ``bos_token``, the tts eos and pad tokens) and the speakers of ``spk_dict.pt``.

**What the talker consumes** (as ``Qwen2_5OmniForConditionalGeneration.generate`` builds it, per
request): with P prompt tokens and G reply tokens ``gen``, and per position ``x = final + emb``
(the thinker's last hidden state plus its embedding-layer output, the embeddings zeroed at
audio/image/video positions of the prompt):

* prefill, P + 2 rows: ``x`` of the prompt, the thinker embedding of the speaker's ``bos_token``
  (+ the codec pad embedding), ``x`` of ``gen[0]`` (+ the codec bos embedding); 3D rope positions
  from the talker's ``get_rope_index`` over ``[prompt ids, bos_token, gen[0]]``;
* decode step k ≥ 1: the codec embedding of the previous code plus reply row k - 1 of
  ``[x(gen[1]) .. x(gen[R-2]), emb(tts_eos), emb(tts_pad), emb(tts_pad), ...]``, where R is G, or
  less when the thinker emitted an eos token before its end (transformers' per-row rewrite).

So talker step k needs the thinker's row of ``gen[k]``, which the thinker emits with ``gen[k+1]``:
on a ``stream`` edge the talker follows the thinker one token behind, and runs free (eos, then pad
rows) once the thinker finished. A reply of a single token (G = 1) gives no codes.

**Input** (what :mod:`omni_qwen.bridge` makes of the thinker's outputs; several chunks through
``add_input`` on a stream edge): a dict with ``token_ids`` (new reply tokens), ``start`` plus
``embeddings`` and ``final`` (float32 ``[rows, hidden]`` for positions ``start ..``), and, in the
first chunk, ``prompt_ids`` and ``image_sizes`` (``[height, width]`` per image: the 3D positions of
image tokens follow the image's grid).

**Sampling** (the talker stage's ``SamplingParams``): ``temperature`` (0: greedy), ``top_k``,
``top_p``, ``min_p``, ``repetition_penalty`` (over the codec prompt and the codes so far, as
transformers), ``max_tokens`` (default ``options.max_tokens``, 4096 as transformers), ``seed``
(a per-request generator: the same draws as ``torch.manual_seed(seed)`` before transformers'
talker). The codec bos is suppressed; the talker stops at a codec pad or end code (transformers'
``talker_eos_token_id``), which is not emitted: ``token_ids`` are the codes, ``finish_reason``
``stop``, or ``length`` at ``max_tokens``. Other sampling fields do not apply and are ignored.
``params.extra["voice"]``: a speaker of ``spk_dict.pt`` (default ``options.voice``, "Chelsie");
an unknown one is a 400 naming the available ones.

One talker step per engine step for every request that can step; each request keeps its own KV
cache. Prefills run one forward per request (their lengths differ). **Decode steps are batched**
(:mod:`omni_qwen.talker_batch`): the requests decoding in an engine step (up to
``options.max_batch``) share one forward of one row each, their caches left-padded to the
longest, an attention mask hiding the padding and each request's own 3D rope position; the new
cache rows are cut back out per request. Codes are transformers' batch-of-one's up to float
rounding (a lone request, or ``max_batch: 1``, runs exactly the batch-of-one forward).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_qwen.checkpoint import (
    ImageGrid,
    generation_config,
    local_checkpoint,
    read_rows,
    token_ids,
)
from omni_qwen.talker_batch import decode_rows

logger = logging.getLogger(__name__)

DEFAULT_VOICE = "Chelsie"
BRIDGE_NAME = "qwen2.5-omni-talker"  # omni_qwen.bridge: what makes this engine's input
THINKER_EMBEDDINGS = "thinker.model.embed_tokens.weight"


class TalkerOptions(BaseModel):
    """``engine_args.options`` of a talker stage."""

    model_config = ConfigDict(extra="forbid")

    voice: str = Field(default=DEFAULT_VOICE, description="speaker when a request names none")
    max_tokens: int = Field(default=4096, ge=1, description="codes per request when unset")
    dtype: str = Field(default="float32", description="torch dtype of the talker's weights")
    device: str = Field(default="cpu", description="torch device of the talker")
    max_batch: int = Field(
        default=64,
        ge=1,
        description="decode steps of concurrent requests in one forward (1: a forward each)",
    )


@dataclass
class _Request:
    """One request's state: what the thinker sent so far and where the talker is."""

    rid: str
    bos_token: int
    max_tokens: int
    greedy: bool
    processors: list[Any]
    generator: Any
    stream: bool
    prompt_ids: list[int] | None = None
    grids: Any = None  # each image's (t, h, w) grid, None without images
    rows: list[Any] = field(default_factory=list)  # x = final + emb per position, 1-D tensors
    reply: list[int] = field(default_factory=list)  # the thinker's reply tokens so far
    eos: int | None = None  # index of the reply's first thinker eos token
    done: bool = False  # the thinker finished: no more rows or tokens
    cache: Any = None
    past: int = 0  # positions in the KV cache
    rope_delta: int = 0
    codes: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)  # codes not sent yet (stream_outputs False)


class TalkerEngine(TorchStageEngine):
    kind = "qwen2.5-omni talker"

    def __init__(self, config: dict[str, Any]) -> None:
        import torch
        import transformers
        from transformers import Qwen2_5OmniConfig, Qwen2_5OmniTalkerForConditionalGeneration

        try:
            self.options = TalkerOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError([f"talker options: {exc}"]) from None
        if not config.get("model"):
            raise ConfigError(["the talker needs engine_args.model (a Qwen2.5-Omni checkpoint)"])
        started = time.perf_counter()
        self.torch = torch
        self.dtype = getattr(torch, self.options.dtype)
        self.device = torch.device(self.options.device)
        checkpoint = local_checkpoint(str(config["model"]))
        omni = Qwen2_5OmniConfig.from_pretrained(checkpoint)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # the thinker's/token2wav's keys: unused here
        try:
            talker = Qwen2_5OmniTalkerForConditionalGeneration.from_pretrained(
                checkpoint, config=omni.talker_config, dtype=self.dtype
            )
        finally:
            transformers.logging.set_verbosity(verbosity)
        self.talker = talker.to(self.device).eval()
        tc = omni.talker_config
        self.codec_bos, self.codec_pad = tc.tts_codec_start_token_id, tc.tts_codec_pad_token_id
        self.codec_mask, self.codec_end = tc.tts_codec_mask_token_id, tc.tts_codec_end_token_id
        self.stop_codes = (self.codec_pad, self.codec_end)  # generate()'s talker_eos_token_id
        self.multimodal = {tc.audio_token_index, tc.image_token_index, tc.video_token_index}
        self.audio_start, self.audio_end = tc.audio_start_token_id, tc.audio_end_token_id
        self.image_token = tc.image_token_index

        speakers = torch.load(checkpoint / "spk_dict.pt", weights_only=True)
        self.voices = {name: int(spk["bos_token"]) for name, spk in speakers.items()}
        if self.options.voice not in self.voices:
            raise ConfigError([self.unknown_voice(self.options.voice)])
        wanted = {tc.tts_text_end_token_id, tc.tts_text_pad_token_id, *self.voices.values()}
        rows = read_rows(checkpoint, THINKER_EMBEDDINGS, sorted(wanted))
        self.text_embedding = {i: row.to(self.device, self.dtype) for i, row in rows.items()}
        self.text_eos = self.text_embedding[tc.tts_text_end_token_id]
        self.text_pad = self.text_embedding[tc.tts_text_pad_token_id]
        codec = self.talker.get_input_embeddings()
        with torch.inference_mode():
            ids = torch.tensor([self.codec_bos, self.codec_pad], device=self.device)
            self.codec_bos_embedding, self.codec_pad_embedding = codec(ids)
        self.thinker_eos = token_ids(generation_config(checkpoint).get("eos_token_id"))
        self.image_grid = ImageGrid(checkpoint)
        layer_types = getattr(tc, "layer_types", None) or ["full_attention"]
        # left-padded batch caches assume full attention (a sliding layer's cache is cut)
        self.batch = self.options.max_batch if set(layer_types) == {"full_attention"} else 1
        self.requests: dict[str, _Request] = {}
        logger.info("talker loaded from %s in %.1f s", checkpoint, time.perf_counter() - started)

    def unknown_voice(self, voice: Any) -> str:
        return f"unknown voice {voice!r}: this model has {', '.join(sorted(self.voices))}"

    # --- commands -------------------------------------------------------------------------------
    def add(self, request: Any) -> None:
        params = request.params
        voice = params.extra.get("voice", self.options.voice)
        if voice not in self.voices:
            raise RequestError(self.unknown_voice(voice), param="voice")
        greedy = params.temperature == 0.0
        generator = None
        if not greedy:
            generator = self.torch.Generator(device=self.device)
            if params.seed is not None:
                generator.manual_seed(params.seed)
            else:
                generator.seed()
        state = _Request(
            rid=request.request_id,
            bos_token=self.voices[voice],
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
        """transformers' logits processors, in ``generate``'s order."""
        from transformers.generation import (
            MinPLogitsWarper,
            RepetitionPenaltyLogitsProcessor,
            SuppressTokensLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        processors: list[Any] = []
        if params.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
        processors.append(SuppressTokensLogitsProcessor([self.codec_bos], device=self.device))
        if greedy:
            return processors
        if params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if params.top_k is not None and params.top_k > 0:
            processors.append(TopKLogitsWarper(top_k=params.top_k))
        if params.top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=params.top_p))
        if params.min_p > 0.0:
            processors.append(MinPLogitsWarper(min_p=params.min_p))
        return processors

    def _feed(self, state: _Request, chunk: Any, first: bool) -> None:
        """Take one chunk of the thinker's output (the bridge's dict)."""
        if not isinstance(chunk, dict):
            raise RequestError(
                f"the talker takes the thinker's states (the {BRIDGE_NAME!r} bridge's dict), "
                f"not {type(chunk).__name__}"
            )
        torch = self.torch
        if first:
            prompt_ids = chunk.get("prompt_ids")
            if not prompt_ids:
                raise RequestError("the talker's first input lacks the thinker's prompt_ids")
            state.prompt_ids = [int(t) for t in prompt_ids]
            sizes = [(int(h), int(w)) for h, w in chunk.get("image_sizes") or ()]
            state.grids = self.image_grid.grids(sizes, state.prompt_ids, self.image_token)
        for token in chunk.get("token_ids") or ():
            if state.eos is None and int(token) in self.thinker_eos:
                state.eos = len(state.reply)
            state.reply.append(int(token))
        if chunk.get("embeddings") is None:
            if state.reply and not state.rows:
                raise RequestError(
                    "the talker needs the thinker's hidden states: give the thinker stage "
                    "engine_args.hidden_states: {layers: [embeddings, final]}"
                )
            return
        start = int(chunk.get("start", 0))
        if start != len(state.rows):
            raise RequestError(
                f"thinker states for positions from {start}, expected {len(state.rows)}"
            )
        emb = torch.as_tensor(chunk["embeddings"]).to(self.device, self.dtype)
        final = torch.as_tensor(chunk["final"]).to(self.device, self.dtype)
        if emb.shape != final.shape or emb.ndim != 2:
            raise RequestError(f"thinker states of shapes {emb.shape} and {final.shape}")
        assert state.prompt_ids is not None
        prompt_len = len(state.prompt_ids)
        for i in range(emb.shape[0]):
            pos = start + i
            if pos < prompt_len and state.prompt_ids[pos] in self.multimodal:
                state.rows.append(final[i].clone())  # generate() zeroes these embeddings
            else:
                state.rows.append(final[i] + emb[i])

    # --- stepping -------------------------------------------------------------------------------
    def reply_length(self, state: _Request) -> int | None:
        """R: the reply tokens the talker reads (rows of gen[0 .. R-2], then the tts eos), once
        known: G when the thinker finished; less when it emitted an eos token before its end
        (transformers' per-row rewrite: the text after the first eos is not spoken)."""
        eos = state.eos
        if eos is not None and eos >= 1:
            return eos + 1
        if eos == 0 and len(state.reply) >= 2:
            return 2
        return len(state.reply) if state.done else None

    def plan(self, state: _Request) -> tuple[str, int] | None:
        """What the next step reads: ``("prefill", 0)``, ``("row", position)``, ``("eos", 0)``,
        ``("pad", 0)``, ``("empty", 0)`` (no codes: a one-token reply) or None (wait for the
        thinker). Raises RequestError when the thinker finished without a row this needs."""
        assert state.prompt_ids is not None
        prompt_len = len(state.prompt_ids)
        reply = self.reply_length(state)
        if not state.codes:  # the prefill reads the prompt's rows and gen[0]'s
            if reply is not None and reply < 2:
                return ("empty", 0)
            wanted: tuple[str, int] = ("prefill", prompt_len)
        else:
            j = len(state.codes) - 1  # decode step k = j + 1 reads reply row j
            if reply is not None and j >= reply - 2:
                return ("eos", 0) if j == reply - 2 else ("pad", 0)
            wanted = ("row", prompt_len + 1 + j)
        if wanted[1] < len(state.rows):
            return wanted
        if state.done:
            raise RequestError(
                f"the thinker's states end at position {len(state.rows) - 1}; the talker needs "
                f"position {wanted[1]}"
            )
        return None

    def inputs(self, state: _Request, plan: tuple[str, int]) -> Any:
        """The rows a planned step feeds the talker (before its projection)."""
        kind, pos = plan
        if kind == "prefill":  # generate()'s prompt, with the codec pad/bos its forward adds
            return self.torch.stack(
                [
                    *state.rows[:pos],
                    self.text_embedding[state.bos_token] + self.codec_pad_embedding,
                    state.rows[pos] + self.codec_bos_embedding,
                ]
            )
        if kind == "row":
            return state.rows[pos]
        return self.text_eos if kind == "eos" else self.text_pad

    def has_work(self) -> bool:
        for state in self.requests.values():
            try:
                if self.plan(state) is not None:
                    return True
            except Exception:
                return True  # step reports it
        return False

    def step(self) -> list[StageOutput]:
        outputs: list[StageOutput] = []
        ready: list[tuple[_Request, tuple[str, int]]] = []
        for rid, state in list(self.requests.items()):
            try:
                plan = self.plan(state)
            except Exception as exc:  # this request's own failure: it ends, the others go on
                del self.requests[rid]
                outputs.append(error_output(rid, exc))
                continue
            if plan is not None:
                ready.append((state, plan))
        decoding = [(s, p) for s, p in ready if s.cache is not None and p[0] != "empty"]
        rows: dict[str, Any] = {}  # each batched request's logits row, sampled in its own step
        for lo in range(0, len(decoding), self.batch):
            group = decoding[lo : lo + self.batch]
            if len(group) > 1:
                try:
                    batched = self.forward_batch(group)
                except Exception:  # each request's own forward then says what is wrong
                    logger.exception("batched talker step of %d requests", len(group))
                    continue
                rows.update(zip([s.rid for s, _ in group], batched, strict=True))
        for state, plan in ready:
            try:
                out = self._step_one(state, plan, rows.get(state.rid))
            except Exception as exc:  # this request's own failure: it ends, the others go on
                del self.requests[state.rid]
                outputs.append(error_output(state.rid, exc))
                continue
            if out is not None:
                outputs.append(out)
                if out.finished:
                    del self.requests[state.rid]
        return outputs

    def _step_one(
        self, state: _Request, plan: tuple[str, int], row: Any | None
    ) -> StageOutput | None:
        """One request's step: its code sampled from its row of the batched forward's logits
        (its cache already advanced by it: a failure here fails this request alone, it is never
        stepped twice), or from its own forward."""
        if plan[0] == "empty":
            return self._finish(state, "stop")
        if row is None:
            code = self.forward(state, self.inputs(state, plan))
        else:
            with self.torch.inference_mode():
                code = self.sample(state, row)
        if code in self.stop_codes:
            return self._finish(state, "stop")
        state.codes.append(code)
        if len(state.codes) >= state.max_tokens:
            state.held.append(code)
            return self._finish(state, "length")
        if not state.stream:
            state.held.append(code)
            return None
        return StageOutput(request_id=state.rid, token_ids=[code])

    def _finish(self, state: _Request, reason: str) -> StageOutput:
        codes, state.held = state.held, []
        return StageOutput(
            request_id=state.rid, token_ids=codes, finished=True, finish_reason=reason
        )

    def forward(self, state: _Request, x: Any) -> int:
        """One talker forward (the prefill, or one decode row) and the next code."""
        torch = self.torch
        with torch.inference_mode():
            if state.cache is None:
                from transformers import DynamicCache

                state.cache = DynamicCache(config=self.talker.config)
                positions = self.prefill_positions(state, x.shape[0])
                inputs = x[None]
            else:
                codec = self.talker.get_input_embeddings()
                previous = torch.tensor([[state.codes[-1]]], device=self.device)
                inputs = codec(previous) + x[None, None]
                pos = state.past + state.rope_delta
                positions = torch.full((3, 1, 1), pos, dtype=torch.long, device=self.device)
            length = state.past + inputs.shape[1]
            out = self.talker(
                inputs_embeds=inputs,
                attention_mask=torch.ones((1, length), dtype=torch.long, device=self.device),
                position_ids=positions,
                past_key_values=state.cache,
                use_cache=True,
            )
            state.past = length
            return self.sample(state, out.logits[:, -1])

    def sample(self, state: _Request, logits: Any) -> int:
        """The next code of ``state`` from its logits (``[1, vocab]``), as ``generate``."""
        torch = self.torch
        logits = logits.to(copy=True, dtype=torch.float32)
        history = torch.tensor(
            [[self.codec_mask, self.codec_pad, self.codec_bos, *state.codes]], device=self.device
        )
        for processor in state.processors:
            logits = processor(history, logits)
        if state.greedy:
            return int(torch.argmax(logits, dim=-1))
        probs = torch.nn.functional.softmax(logits, dim=-1)
        return int(torch.multinomial(probs, num_samples=1, generator=state.generator))

    def forward_batch(self, group: list[tuple[_Request, tuple[str, int]]]) -> list[Any]:
        """One decode row of each request of ``group`` (its state, its planned step; all past
        their prefill) in one forward (:func:`omni_qwen.talker_batch.decode_rows`): each
        request's logits row ``[1, vocab]``, sampled in its own step."""
        torch = self.torch
        states = [s for s, _ in group]
        with torch.inference_mode():
            rows = torch.stack([self.inputs(s, plan) for s, plan in group])
            logits = decode_rows(torch, self.talker, states, rows, self.device)
            return [logits[i : i + 1] for i in range(len(states))]

    def prefill_positions(self, state: _Request, length: int) -> Any:
        """The talker's 3D rope positions over ``[prompt ids, bos_token, gen[0]]`` (and the
        delta that continues them), by the talker's own ``get_rope_index``."""
        torch = self.torch
        assert state.prompt_ids is not None
        text_ids = torch.tensor(
            [[*state.prompt_ids, state.bos_token, state.reply[0]]], device=self.device
        )
        grids = state.grids
        audio_lengths = self.audio_lengths(state.prompt_ids) if grids is not None else None
        positions, delta = self.talker.get_rope_index(
            text_ids,
            grids,
            None,
            torch.ones((1, length), dtype=torch.long, device=self.device),
            False,
            audio_lengths,
            None,
        )
        state.rope_delta = int(delta.reshape(-1)[0])
        return positions

    def audio_lengths(self, prompt_ids: list[int]) -> Any:
        """Feature lengths that ``get_rope_index`` turns back into each audio's token count n
        (``((L - 1) // 2 + 1 - 2) // 2 + 1 == n`` for L = 4n - 1): the positions need only n."""
        lengths, inside = [], None
        for token in prompt_ids:
            if token == self.audio_start:
                inside = 0
            elif token == self.audio_end and inside is not None:
                lengths.append(4 * inside - 1)
                inside = None
            elif inside is not None:
                inside += 1
        return self.torch.tensor(lengths, dtype=self.torch.long) if lengths else None


def build(config: dict[str, Any]) -> TalkerEngine:
    return TalkerEngine(config)
