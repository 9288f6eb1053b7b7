"""Qwen2.5-Omni's token2wav as a stage engine: talker codec ids → a 24 kHz waveform.

``build(config)`` is the factory the core's ``torch`` stage kind calls in the stage process
(``config``: ``{"model": <checkpoint dir>, "threads": n, "options": {...}}``). The engine loads
only what token2wav needs from the checkpoint: ``config.json``'s ``token2wav_config``, the
``token2wav.*`` tensors of the safetensors file(s) (a sharded checkpoint: only the shards that hold
them) and ``spk_dict.pt``; float32, on the CPU. The thinker and talker weights are never read.

**Request.** ``prompt``: the talker's codec ids, a sequence of ints (list, tuple or 1-D integer
array). As ``generate()`` does with the talker's output, the codes are cut at the first stop code
(``options.stop_codes``, by default the talker's codec pad and end ids from ``config.json``: the
``talker_eos_token_id`` that ``generate()`` uses); each id must lie in ``[0, dit.num_embeds]``
and the utterance may hold at most ``dit.max_position_embeddings / dit.repeats`` codes. With
``streaming_input`` the codes arrive in chunks (``add_input``); they are buffered and the utterance
is synthesized once the input is final. ``params.extra["voice"]``: a speaker of ``spk_dict.pt``
(default ``options.voice``, ``"Chelsie"``; it must be the talker's voice too). Bad input (unknown
voice, out-of-range id, too long) raises :class:`~omni_core.errors.RequestError` (a
``ValueError``: the worker answers 400).

**Whole-utterance decoding.** The DiT attends block-wise (``block_size`` mel frames; one block
ahead and one or two behind on a few layers), but its flow ODE chains 4 evaluations per RK4
interval over ``num_steps - 1`` intervals (36 forwards at the default 10 steps), so one output
frame depends on about 36 blocks ahead and up to 72 behind: 432 codes ahead with the released
block size 24. Chunked decoding (each chunk with a few blocks of context, noise sliced per
position) is what the block attention was trained for and would cut latency to about one chunk
plus one look-ahead block, at the price of recomputing the context blocks per chunk (``(chunk +
context) / chunk`` of the DiT cost) and of a waveform that differs from transformers' whole
decoding. This engine decodes whole utterances, which keeps exact parity with ``generate()``,
unless a request asks for streamed audio (``extra["audio"]["stream"]``, the core's generic
audio option, or ``extra["audio_stream"]``): then chunk by chunk, :mod:`omni_qwen.stream_wav`.

**Seeding.** The DiT's initial noise is ``torch.randn([1, 2·len(codes), mel_dim])`` drawn by
``Qwen2_5OmniToken2WavDiTModel.sample`` from the CPU default generator. The engine seeds that
generator with ``params.seed`` (what ``torch.manual_seed(seed)`` does just before calling
``Qwen2_5OmniToken2WavModel``) inside ``torch.random.fork_rng``, which restores its previous state
afterwards, so the noise — and the waveform — equal transformers' for the same seed. Without a
seed, a fresh one from ``secrets`` (logged at debug level).

**Output.** One ``StageOutput`` per request: ``finished``, ``finish_reason="stop"``, ``token_ids``
the codes voiced (after the stop-code cut), ``payload`` an :class:`~omni_core.media.AudioChunk`
(float32 mono through the data plane, 24 kHz). No codes (the talker stopped at once) is a valid
utterance with no speech: an empty waveform, not an error. One utterance is synthesized per
``step``, so commands (aborts, new requests) are taken between utterances; a failure while
synthesizing fails that request only.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_core import ConfigError, OmniError, RequestError, StageOutput
from omni_core.extend import TorchStageEngine, error_output
from omni_core.family import audio_streamed
from omni_qwen.stream_wav import ChunkSynth, StreamDecoder, StreamOptions

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000  # Qwen2.5-Omni's output rate (BigVGAN: 240 samples per mel frame)
DEFAULT_VOICE = "Chelsie"
PREFIX = "token2wav."


class Token2WavLoadError(OmniError):
    """The checkpoint lacks what token2wav needs (a file, a config section, tensors)."""


class Token2WavOptions(BaseModel):
    """``engine_args.options`` of a token2wav stage (defaults: ``Qwen2_5OmniToken2WavModel``'s,
    which ``generate()`` uses)."""

    model_config = ConfigDict(extra="forbid")

    num_steps: int = Field(default=10, ge=2, description="ODE time points of the DiT sampler")
    guidance_scale: float = Field(default=0.5, ge=0.0, description="classifier-free guidance")
    sway_coefficient: float = Field(default=-1.0, description="sway sampling of the time grid")
    stop_codes: list[int] | None = Field(
        default=None, description="codes that end the utterance; None: the talker's pad and end"
    )
    voice: str = Field(default=DEFAULT_VOICE, description="speaker when a request names none")
    stream: StreamOptions = Field(
        default_factory=StreamOptions,
        description="chunked decoding of requests with extra.audio_stream (omni_qwen.stream_wav)",
    )


@dataclass
class _Utterance:
    seed: int
    speaker: dict[str, Any]
    codes: list[int] = field(default_factory=list)
    final: bool = False
    stopped: bool = False  # a stop code arrived: later codes are dropped
    decoder: StreamDecoder | None = None  # streamed decoding (extra.audio_stream)
    voiced: int = 0  # codes reported in earlier chunk outputs

    def ready(self) -> bool:
        if self.decoder is None:
            return self.final
        return self.decoder.ready(self.codes, self.final)


class Token2WavEngine(TorchStageEngine):
    kind = "token2wav"
    request_errors = (ValueError, OverflowError)

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        from omni_core.extend import default_plane

        try:
            self.options = Token2WavOptions.model_validate(config.get("options") or {})
        except ValidationError as exc:
            raise ConfigError(
                [
                    f"engine_args.options.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                    for e in exc.errors()
                ]
            ) from None
        model_dir = _model_dir(config.get("model"))
        torch.set_num_threads(int(config.get("threads", 1)))
        self.torch = torch
        started = time.perf_counter()
        self.model, checkpoint = load_token2wav(model_dir)
        self.speakers: dict[str, dict[str, Any]] = load_speakers(model_dir)
        self.load_s = time.perf_counter() - started
        if self.options.voice not in self.speakers:
            raise ConfigError(
                [f"engine_args.options.voice: {self._unknown_voice(self.options.voice)}"]
            )
        dit = self.model.config.dit_config
        self.max_code = dit.num_embeds  # the codec table has num_embeds + 1 rows
        self.max_codes = dit.max_position_embeddings // dit.repeats
        stops = self.options.stop_codes
        if stops is None:
            talker = checkpoint.get("talker_config", {})
            stops = [
                talker[k]
                for k in ("tts_codec_pad_token_id", "tts_codec_end_token_id")
                if isinstance(talker.get(k), int)
            ]
        self.stop_codes = frozenset(stops)
        self.plane = default_plane()
        self.chunker = ChunkSynth(self.model, self.options, self.options.stream)
        self.requests: dict[str, _Utterance] = {}  # in stepping order (round robin)
        logger.info(
            "token2wav loaded from %s in %.2f s (voices %s)",
            config["model"],
            self.load_s,
            sorted(self.speakers),
        )

    # -- WorkerEngine ------------------------------------------------------------------------

    def add(self, request: Any) -> None:
        rid = request.request_id
        if rid in self.requests:
            raise RequestError(f"token2wav: request {rid!r} is already running")
        params = request.params
        voice = params.extra.get("voice", self.options.voice)
        if not isinstance(voice, str) or voice not in self.speakers:
            raise RequestError(
                f"token2wav: {self._unknown_voice(voice)} (sampling_params.extra.voice)",
                param="voice",
            )
        seed = params.seed
        if seed is None:
            seed = secrets.randbits(63)
            logger.debug("request %s: token2wav seed %d", rid, seed)
        state = _Utterance(seed=seed, speaker=self.speakers[voice])
        if audio_streamed(params.extra, stage="token2wav"):
            state.decoder = StreamDecoder(self.chunker, seed, state.speaker)
        self._extend(rid, state, request.prompt)
        state.final = not request.streaming_input
        self.requests[rid] = state

    def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        state = self.requests.get(request_id)
        if state is None or state.final:
            return  # aborted, or already complete
        self._extend(request_id, state, prompt)
        state.final = final

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def has_work(self) -> bool:
        return any(state.ready() for state in self.requests.values())

    def step(self) -> list[StageOutput]:
        """One whole utterance, or one chunk of a streamed one: the first ready request in
        round-robin order (a streamed one goes to the back after its chunk)."""
        rid = next((r for r, state in self.requests.items() if state.ready()), None)
        if rid is None:
            return []
        state = self.requests.pop(rid)
        try:
            if state.decoder is not None:
                out = self._chunk(rid, state)
                if not out.finished:
                    self.requests[rid] = state
                return [out]
            return [self._finish(rid, state)]
        except Exception as exc:  # this request's own failure: it ends, the others go on
            logger.warning("request %s failed in token2wav", rid, exc_info=True)
            return [error_output(rid, exc, self.request_errors)]

    def _unknown_voice(self, voice: Any) -> str:
        return f"unknown voice {voice!r}; available: {', '.join(sorted(self.speakers))}"

    # -- synthesis ---------------------------------------------------------------------------

    def synthesize(self, codes: list[int], speaker: dict[str, Any], seed: int) -> Any:
        """The float32 waveform of ``codes`` (numpy, 1-D) in ``speaker``'s voice, noise seeded
        with ``seed``; empty for no codes."""
        import numpy as np

        torch = self.torch
        if not codes:
            return np.zeros(0, dtype=np.float32)
        opts = self.options
        code = torch.tensor([codes], dtype=torch.long)
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.default_generator.manual_seed(seed)
            wave = self.model(
                code,
                conditioning=speaker["cond"],
                reference_mel=speaker["ref_mel"],
                num_steps=opts.num_steps,
                guidance_scale=opts.guidance_scale,
                sway_coefficient=opts.sway_coefficient,
            )
        return wave.reshape(-1).to(torch.float32).numpy()

    def _finish(self, rid: str, state: _Utterance) -> StageOutput:
        from omni_core.extend import AudioChunk

        started = time.perf_counter()
        wave = self.synthesize(state.codes, state.speaker, state.seed)
        logger.debug(
            "request %s: %d codes → %d samples in %.3f s",
            rid,
            len(state.codes),
            len(wave),
            time.perf_counter() - started,
        )
        return StageOutput(
            request_id=rid,
            token_ids=state.codes,
            finished=True,
            finish_reason="stop",
            payload=AudioChunk(self.plane.put(wave), SAMPLE_RATE),
        )

    def _chunk(self, rid: str, state: _Utterance) -> StageOutput:
        """The next chunk of a streamed utterance (its waveform; ``token_ids``: the codes whose
        decoding it completed)."""
        from omni_core.extend import AudioChunk

        assert state.decoder is not None
        started = time.perf_counter()
        with self.torch.inference_mode():
            wave, done = state.decoder.step(state.codes, state.final)
        upto = state.decoder.state.next_code
        codes, state.voiced = state.codes[state.voiced : upto], upto
        logger.debug(
            "request %s: chunk to code %d → %d samples in %.3f s",
            rid,
            upto,
            len(wave),
            time.perf_counter() - started,
        )
        return StageOutput(
            request_id=rid,
            token_ids=codes,
            finished=done,
            finish_reason="stop" if done else None,
            payload=AudioChunk(self.plane.put(wave), SAMPLE_RATE),
        )

    def _extend(self, rid: str, state: _Utterance, prompt: Any) -> None:
        if state.stopped:
            return
        for i, code in enumerate(_as_codes(prompt, rid)):
            if code in self.stop_codes:
                state.stopped = True
                break
            if not 0 <= code <= self.max_code:
                raise RequestError(
                    f"token2wav: request {rid!r}: codec id {code} at position "
                    f"{len(state.codes)} (chunk index {i}) is outside [0, {self.max_code}]"
                )
            state.codes.append(code)
        if len(state.codes) > self.max_codes:
            raise RequestError(
                f"token2wav: request {rid!r} has {len(state.codes)} codes, more than the DiT's "
                f"{self.max_codes} (max_position_embeddings / repeats)"
            )


def _as_codes(prompt: Any, rid: str) -> list[int]:
    """The codec ids of a prompt or chunk (None or an empty sequence: none)."""
    import numpy as np

    if prompt is None:
        return []
    if isinstance(prompt, np.ndarray) and prompt.ndim == 1 and prompt.dtype.kind in "iu":
        return [int(c) for c in prompt]
    if isinstance(prompt, (list, tuple)) and all(
        isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in prompt
    ):
        return [int(c) for c in prompt]
    raise RequestError(
        f"token2wav: request {rid!r}: the prompt must be a sequence of codec ids (ints), "
        f"got {type(prompt).__name__}"
    )


# -- loading ---------------------------------------------------------------------------------


def load_token2wav(model_dir: Path) -> tuple[Any, dict[str, Any]]:
    """``Qwen2_5OmniToken2WavModel`` (float32, eval) from the ``token2wav.*`` tensors of the
    checkpoint in ``model_dir``, and the checkpoint's ``config.json``."""
    import torch
    from safetensors import safe_open
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (
        Qwen2_5OmniToken2WavConfig,
    )
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniToken2WavModel

    checkpoint = _read_json(model_dir / "config.json")
    if "token2wav_config" not in checkpoint:
        raise Token2WavLoadError(f"{model_dir / 'config.json'} has no token2wav_config")
    config = Qwen2_5OmniToken2WavConfig.from_dict(checkpoint["token2wav_config"])
    model = Qwen2_5OmniToken2WavModel._from_config(config, dtype=torch.float32)
    state: dict[str, Any] = {}
    for shard in _shards(model_dir):
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():
                if key.startswith(PREFIX):
                    state[key[len(PREFIX) :]] = f.get_tensor(key).to(torch.float32)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise Token2WavLoadError(
            f"{model_dir}: token2wav weights do not fit the config: "
            f"missing {result.missing_keys[:5]} ({len(result.missing_keys)}), "
            f"unexpected {result.unexpected_keys[:5]} ({len(result.unexpected_keys)})"
        )
    return model.eval(), checkpoint


def load_speakers(model_dir: Path) -> dict[str, dict[str, Any]]:
    """``spk_dict.pt``: per voice ``cond`` [1, enc_emb_dim] and ``ref_mel`` [1, T, mel_dim] as
    float32 (and ``bos_token``, which the talker uses)."""
    import torch

    path = model_dir / "spk_dict.pt"
    if not path.is_file():
        raise Token2WavLoadError(f"{path} not found: the checkpoint has no speaker dictionary")
    speakers = torch.load(path, weights_only=True)
    try:
        return {
            name: {**spk, "cond": spk["cond"].float(), "ref_mel": spk["ref_mel"].float()}
            for name, spk in speakers.items()
        }
    except (KeyError, AttributeError, TypeError) as exc:
        raise Token2WavLoadError(f"{path}: a voice lacks cond/ref_mel tensors ({exc})") from None


def _model_dir(model: Any) -> Path:
    if not model:
        raise Token2WavLoadError("token2wav needs a checkpoint: set engine_args.model")
    path = Path(model)
    if not path.is_dir():
        raise Token2WavLoadError(
            f"token2wav: engine_args.model {model!r} is not a local checkpoint directory "
            "(a registered model name or a path; download hub checkpoints first)"
        )
    return path


def _shards(model_dir: Path) -> list[Path]:
    """The safetensors files that hold ``token2wav.*`` tensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map", {})
        names = sorted({f for k, f in weight_map.items() if k.startswith(PREFIX)})
        shards = [model_dir / n for n in names]
    else:
        shards = (
            [model_dir / "model.safetensors"] if (model_dir / "model.safetensors").is_file() else []
        )
    missing = [str(s) for s in shards if not s.is_file()]
    if not shards or missing:
        raise Token2WavLoadError(
            f"{model_dir}: no safetensors file with token2wav weights"
            + (f" (missing {missing})" if missing else "")
        )
    return shards


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Token2WavLoadError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise Token2WavLoadError(f"{path} is not a JSON object")
    return data


def build(config: dict[str, Any]) -> Token2WavEngine:
    """The token2wav engine of a stage process (the ``torch`` kind's ``engine_args.engine``)."""
    return Token2WavEngine(config)
