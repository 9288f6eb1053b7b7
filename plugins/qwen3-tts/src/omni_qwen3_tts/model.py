"""Loading a Qwen3-TTS checkpoint through the official classes (fixed by :mod:`.shim`) and the
talker's prefill rows, as the official ``Qwen3TTSForConditionalGeneration.generate`` builds them.

**The prefill** (one request; ``ids``: the tokenized ``<|im_start|>assistant\\n{text}<|im_end|>\\n
<|im_start|>assistant\\n``, whose role is 3 tokens and suffix 5): the instruction's rows
``text_projection(text_embedding(<|im_start|>user\\n{instruct}<|im_end|>\\n))`` when there is
one; the role's 3 rows; then ``tts_pad`` x (C - 2) and ``tts_bos`` added to the codec prefix
``[think|nothink, think_bos, (language), think_eos, (speaker), pad]`` (C: its length + 1); then
(``non_streaming_mode``, the custom-voice and voice-design default) the text's rows and ``tts_eos``
each added to ``codec_pad``, and ``tts_pad + codec_bos``. Every decode step's text row is then
``tts_pad``. A language names a ``codec_language_id`` (``auto``: none); a dialect speaker with
``chinese``/``auto`` takes its dialect's id.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_core import ConfigError, RequestError

logger = logging.getLogger(__name__)

__all__ = ["Loaded", "Voice", "load", "prefill_rows"]


@dataclass(frozen=True)
class Voice:
    """What a request asks of the voice: ``speaker`` (custom voice), ``instruct``, ``language``,
    ``xvector`` (voice clone: the reference audio's speaker embedding, x-vector mode) and
    ``non_streaming`` (all of the text in the prefill; else one text row per step)."""

    speaker: str | None = None
    instruct: str | None = None
    language: str = "auto"
    xvector: Any = None
    non_streaming: bool = True
    ref_codes: Any = None  # ICL voice clone: the reference's codes [frames, groups]
    ref_text: str | None = None  # ICL voice clone: what the reference says


@dataclass
class Loaded:
    model: Any  # Qwen3TTSForConditionalGeneration (talker + code predictor)
    decoder: Any  # the speech tokenizer's 12 Hz decoder
    tokenizer: Any
    generation: dict[str, Any]  # generation_config.json
    model_type: str
    sample_rate: int
    upsample: int  # samples per frame


def checkpoint_dir(model: str | Path, model_type: str | None) -> Path:
    """``model`` itself when it holds a ``config.json``, else its ``model_type`` subfolder (the
    tiny build writes one per type)."""
    path = Path(model)
    if (path / "config.json").is_file():
        return path
    if model_type and (path / model_type / "config.json").is_file():
        return path / model_type
    raise ConfigError([f"{model}: no Qwen3-TTS checkpoint (config.json) for {model_type!r}"])


def load(path: Path) -> Loaded:
    import torch
    from transformers import AutoTokenizer

    from omni_qwen3_tts.shim import import_qwen_tts, restore_rope

    import_qwen_tts()
    from qwen_tts.core.models import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    model = Qwen3TTSForConditionalGeneration.from_pretrained(
        str(path), dtype=torch.float32
    ).eval()  # loads speech_tokenizer/ too (the official loader)
    speech = model.speech_tokenizer.model
    if not isinstance(speech, Qwen3TTSTokenizerV2Model):
        raise ConfigError([f"{path}: only the 12 Hz speech tokenizer is supported"])
    restore_rope(model)
    restore_rope(speech)
    generation = json.loads((path / "generation_config.json").read_text())
    return Loaded(
        model=model,
        decoder=speech.decoder.eval(),
        tokenizer=AutoTokenizer.from_pretrained(str(path)),
        generation=generation,
        model_type=str(model.config.tts_model_type),
        sample_rate=int(speech.config.output_sample_rate),
        upsample=int(speech.config.decode_upsample_rate),
    )


def speakers(loaded: Loaded) -> list[str]:
    return sorted(str(k).lower() for k in (loaded.model.config.talker_config.spk_id or {}))


def languages(loaded: Loaded) -> list[str]:
    ids = loaded.model.config.talker_config.codec_language_id or {}
    return ["auto", *sorted(str(k) for k in ids if "dialect" not in str(k))]


def check_voice(loaded: Loaded, voice: Voice) -> None:
    """A 400 naming the field for a voice this checkpoint cannot give."""
    kind = loaded.model_type
    if kind == "custom_voice":
        if not voice.speaker or voice.speaker.lower() not in speakers(loaded):
            raise RequestError(
                f"unknown voice {voice.speaker!r}: this model has {', '.join(speakers(loaded))}",
                param="voice",
            )
    elif kind == "voice_design":
        if not voice.instruct:
            raise RequestError(
                "a voice-design model needs instructions describing the voice", param="instructions"
            )
    elif voice.xvector is None:
        raise RequestError("a voice-clone (base) model needs ref_audio", param="ref_audio")
    elif voice.ref_codes is not None and not voice.ref_text:
        raise RequestError("ICL voice clone needs ref_text", param="ref_text")
    if voice.language.lower() not in languages(loaded):
        raise RequestError(
            f"unknown language {voice.language!r}: this model has {', '.join(languages(loaded))}",
            param="language",
        )


def reference_codes(loaded: Loaded, audio: Any, rate: int) -> Any:
    """The reference's codes ``[frames, groups]`` from the speech tokenizer's Mimi encoder, as
    the official ``create_voice_clone_prompt`` (its own resampling included)."""
    import numpy as np

    encoded = loaded.model.speech_tokenizer.encode(np.asarray(audio, dtype=np.float32), sr=rate)
    return encoded.audio_codes[0]


def _icl_rows(loaded: Loaded, ids_t: Any, voice: Voice, eos: Any, pad: Any) -> tuple[Any, Any]:
    """The official ``generate_icl_prompt``'s rows and trailing text: the reference text then
    the text (and ``tts_eos``) against ``codec_bos`` then the reference frames' summed code
    embeddings; streaming text (the clone default): as many text rows as codec rows in the
    prompt, the rest trailing; else all text against ``codec_pad`` then the codec rows."""
    import torch

    model, tc = loaded.model, loaded.model.config.talker_config
    talker = model.talker
    ref = loaded.tokenizer(f"<|im_start|>assistant\n{voice.ref_text}<|im_end|>\n").input_ids
    text_ids = torch.cat([torch.tensor([ref])[:, 3:-2], ids_t[:, 3:-5]], dim=-1)
    text = torch.cat([talker.text_projection(talker.get_text_embeddings()(text_ids))[0], eos[None]])
    codes = voice.ref_codes.to(torch.long)
    tables = talker.code_predictor.get_input_embeddings()
    summed = talker.get_input_embeddings()(codes[:, 0]) + sum(
        tables[i - 1](codes[:, i]) for i in range(1, codes.shape[1])
    )
    codec = torch.cat([talker.get_input_embeddings()(torch.tensor([tc.codec_bos_id])), summed])
    if voice.non_streaming:
        pads = talker.get_input_embeddings()(torch.tensor([tc.codec_pad_id] * text.shape[0]))
        return torch.cat([text + pads, codec + pad]), pad[None][:0]
    if text.shape[0] > codec.shape[0]:
        return text[: codec.shape[0]] + codec, text[codec.shape[0] :]
    padded = torch.cat([text, pad.expand(codec.shape[0] - text.shape[0], -1)])
    return padded + codec, pad[None][:0]


def speaker_embedding(loaded: Loaded, audio: Any, rate: int) -> Any:
    """The x-vector of reference ``audio`` (float32 mono at ``rate``), as the official
    ``create_voice_clone_prompt``: resampled to 24 kHz by librosa, then the ECAPA encoder."""
    import numpy as np

    wav = np.asarray(audio, dtype=np.float32)
    target = int(loaded.model.speaker_encoder_sample_rate)
    if rate != target:
        import librosa

        wav = librosa.resample(y=wav, orig_sr=int(rate), target_sr=target)
    return loaded.model.extract_speaker_embedding(audio=wav, sr=target)


def prefill_rows(loaded: Loaded, text: str, voice: Voice) -> tuple[Any, Any, Any]:
    """The talker's prefill rows ``[rows, hidden]`` for ``text`` in ``voice`` (module doc), the
    trailing text rows fed one per decode step (then ``tts_pad``) and ``tts_pad``."""
    import torch

    model, tc = loaded.model, loaded.model.config.talker_config
    talker = model.talker
    cfg = model.config
    tok = loaded.tokenizer
    ids = tok(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n").input_ids
    ids_t = torch.tensor([ids])

    def project(t: Any) -> Any:
        return talker.text_projection(talker.get_text_embeddings()(t))[0]

    def codec(codes: list[int]) -> Any:
        return talker.get_input_embeddings()(torch.tensor(codes))

    bos, eos, pad = project(
        torch.tensor([[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]])
    )
    language = voice.language.lower()
    language_id = None if language == "auto" else tc.codec_language_id[language]
    speaker = voice.speaker.lower() if voice.speaker else None
    if speaker is not None and language in ("chinese", "auto"):
        dialect = (tc.spk_is_dialect or {}).get(speaker, False)
        if dialect is not False:
            language_id = tc.codec_language_id[dialect]
    if language_id is None:
        prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
    else:
        prefix = [tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]
    tail = codec([tc.codec_pad_id, tc.codec_bos_id])
    if speaker is not None:
        prefix.append(tc.spk_id[speaker])
    codes = codec(prefix)
    if voice.xvector is not None:  # x-vector mode: the embedding is the speaker's codec row
        codes = torch.cat([codes, voice.xvector.reshape(1, -1).to(codes.dtype)])
    codes = torch.cat([codes, tail])
    rows = []
    if voice.instruct:
        instruct = tok(f"<|im_start|>user\n{voice.instruct}<|im_end|>\n").input_ids
        rows.append(project(torch.tensor([instruct])))
    rows.append(project(ids_t[:, :3]))
    n = codes.shape[0]
    rows.append(torch.cat([pad.expand(n - 2, -1), bos[None]]) + codes[:-1])
    if voice.ref_codes is not None:  # ICL voice clone: reference text and codes in the prompt
        icl, trailing = _icl_rows(loaded, ids_t, voice, eos, pad)
        rows.append(icl)
        return torch.cat(rows), trailing, pad
    if not voice.non_streaming:  # the first text token now, the others one per step
        rows.append(project(ids_t[:, 3:4]) + codes[-1:])
        return torch.cat(rows), torch.cat([project(ids_t[:, 4:-5]), eos[None]]), pad
    body = ids_t[:, 3:-5]
    rows.append(
        torch.cat([project(body), eos[None]]) + codec([tc.codec_pad_id] * (body.shape[1] + 1))
    )
    rows.append(pad[None] + codes[-1:])
    return torch.cat(rows), pad[None][:0], pad  # no trailing rows: tts_pad every step
