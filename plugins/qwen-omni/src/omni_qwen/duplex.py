"""Qwen2.5-Omni as an omni-duplex model plug (``qwen2.5-omni``) and the ``qwen2.5-omni-duplex``
pipeline: thinker (vLLM) → talker → token2wav served as full-duplex sessions.

The user's committed audio reaches the thinker **as audio**: each spoken turn is an
``<|audio_bos|><|AUDIO|><|audio_eos|>`` placeholder in the prompt (rendered with Qwen2.5-Omni's
chat-template turn markers) and its samples go in ``multi_modal_data`` (16 kHz float32), so the
thinker's audio encoder hears it; typed text goes in as text. The reply streams as the thinker's
text deltas and token2wav's speech (the generic audio option ``stream``: voiced chunk by chunk).

The conversation lives in the thinker (issue 29): the thinker stage
(:mod:`omni_qwen.duplex_speech`) keeps one resumable vLLM request per session and each response
appends only the new turns (:func:`new_turns`), so a turn prefills about its own tokens; the
stage keeps the session's per-token hidden states and hands the talker the rows of the whole
context with each reply, so the talker's input is the one a fresh request over the conversation
gives. The plug also sends the whole conversation (:func:`render`) and fingerprints of its items:
when the conversation is not what the live request holds (a truncated or deleted item, a session
closed for idleness) the stage restarts the request from it. **Fallback**
(``duplex_pipeline(resumable=False)``, i.e. the thinker stage's ``options.resumable: false``):
each response is a fresh thinker request over the whole conversation, which prefills the whole
history every turn. :data:`MAX_AUDIO_TURNS` caps the spoken turns of the re-rendered conversation
kept as audio (older ones become a short text note) and the stage's ``max_model_len`` caps the
rest (a turn past it fails with one ``error`` event, the engine keeps serving).

Imported only through omni-qwen's optional ``omni_duplex_register_models`` hook implementation:
omni-qwen works without omni-duplex installed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_core import PipelineConfig

logger = logging.getLogger(__name__)

MODEL = "qwen2.5-omni"
PIPELINE = "qwen2.5-omni-duplex"
RESUMABLE_MODEL = "qwen2.5-omni-resumable"
RESUMABLE_PIPELINE = "qwen2.5-omni-duplex-text"
INPUT_RATE = 16_000  # the thinker's audio encoder (Whisper features)
MAX_AUDIO_TURNS = 4  # spoken turns kept as audio in one prompt (limit_mm_per_prompt.audio)
MAX_MODEL_LEN = 2048
THINKER_ENGINE = "omni_qwen.duplex_speech:build"
AUDIO_PART = "<|audio_bos|><|AUDIO|><|audio_eos|>"
# Qwen2.5-Omni's own system prompt: the released model speaks only under it
SYSTEM_PROMPT = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
    "perceiving auditory and visual inputs, as well as generating text and speech."
)
EARLIER_AUDIO = "(an earlier spoken turn)"


def turn(role: str, content: str) -> str:
    """One chat-template turn (Qwen2.5-Omni's markers)."""
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


def render(
    system: str, history: list[dict[str, Any]], turns: list[Any], max_audio: int
) -> dict[str, Any]:
    """The thinker prompt of a conversation: ``{"prompt": text, "multi_modal_data": ...}``.

    ``history`` items: ``{"role", "text"}`` plus ``"audio"`` (16 kHz float32) for a spoken user
    turn; ``turns``: the new committed :class:`~omni_duplex.model.UserTurn` s. The newest
    ``max_audio`` spoken turns go in as audio, older ones as :data:`EARLIER_AUDIO`."""
    return render_items(system, history, turns, max_audio)[0]


def render_items(
    system: str, history: list[dict[str, Any]], turns: list[Any], max_audio: int
) -> tuple[dict[str, Any], list[list[int]]]:
    """:func:`render` and where each item starts in it: ``[character offset in the prompt,
    audio items before it]`` per item (history, then turns), so that the thinker stage can
    leave the oldest items out (the system turn first, then the prompt from item k on)."""
    items: list[tuple[str, str, Any]] = [
        (h["role"], h.get("text", ""), h.get("audio")) for h in history
    ]
    items += [("user", t.text, t.audio) for t in turns]
    spoken = [i for i, (_, _, audio) in enumerate(items) if audio is not None]
    heard = set(spoken[-max_audio:]) if max_audio > 0 else set()
    parts = [turn("system", system)]
    audios: list[tuple[Any, int]] = []
    bounds, offset = [], len(parts[0])
    for index, (role, text, audio) in enumerate(items):
        bounds.append([offset, len(audios)])
        body = ""
        if audio is not None:
            if index in heard:
                body += AUDIO_PART
                audios.append((audio, INPUT_RATE))
            else:
                body += EARLIER_AUDIO
        body += text
        parts.append(turn(role, body))
        offset += len(parts[-1])
    parts.append("<|im_start|>assistant\n")
    prompt: dict[str, Any] = {"prompt": "".join(parts)}
    if audios:
        prompt["multi_modal_data"] = {"audio": audios}
    return prompt, bounds


def build_model(pipeline: Any, section: Any) -> Any:
    """The plug for one engine (the ``omni_duplex_register_models`` factory)."""
    from omni_duplex.model import TinyOmniModel

    from omni_qwen.voices import declared_voices

    speakers = declared_voices(pipeline.config) or ()

    class QwenOmniDuplexModel(TinyOmniModel):
        """Spoken turns as audio, typed turns as text, the conversation re-rendered each
        response; outputs projected as the tiny plug does (text deltas, 24 kHz audio)."""

        name = MODEL
        input_sample_rate = INPUT_RATE
        keeps_audio = True  # the session keeps spoken turns' audio in its history
        voices = speakers  # session.audio.output.voice: the talker's and token2wav's voice

        def validate_pipeline(self, pipeline: Any) -> list[str]:
            problems = list(super().validate_pipeline(pipeline))
            first = pipeline.stages.get(0)
            engine = first.config.engine_args.get("engine") if first is not None else None
            if engine != THINKER_ENGINE:
                problems.append(
                    f"{pipeline.config.source}: duplex model '{MODEL}' needs stage 0 to be the "
                    f"Qwen2.5-Omni thinker of engine_args.engine '{THINKER_ENGINE}'"
                )
            return problems

        def plan_response(self, context: Any) -> Any:
            import msgspec
            from omni_duplex.model import ResponsePlan

            from omni_core.extend import AUDIO_OPTIONS
            from omni_qwen.duplex_resumable import SESSION_KEY

            system = context.session.instructions or SYSTEM_PROMPT
            prompt = new_turns(context.turns)
            full, bounds = render_items(system, context.history, context.turns, MAX_AUDIO_TURNS)
            prompt.update(
                system=system,
                full=full,
                bounds=bounds,
                history=[fingerprint(h) for h in context.history],
                turns=[fingerprint(_user_item(t)) for t in context.turns],
            )
            wants_audio = "audio" in context.session.output_modalities
            params = dict(context.default_params)
            limit = context.session.max_output_tokens
            for sid, value in params.items():
                changes: dict[str, Any] = {}
                extra = dict(value.extra)
                if sid == 0:
                    extra[SESSION_KEY] = context.session_id
                if sid == 0 and limit is not None:
                    changes["max_tokens"] = limit
                if wants_audio:
                    extra[AUDIO_OPTIONS] = {"stream": True}
                if wants_audio and context.session.voice is not None:
                    extra["voice"] = context.session.voice  # as omni run --voice: every stage
                if extra != value.extra:
                    changes["extra"] = extra
                if changes:
                    params[sid] = msgspec.structs.replace(value, **changes)
            return ResponsePlan(prompt, params, None if wants_audio else ["text"])

    return QwenOmniDuplexModel()


def fingerprint(item: dict[str, Any]) -> list[Any]:
    """What identifies a conversation item for the thinker stage: a reply by its role and text
    (the stage knows it as it emitted it), others by role, id, text and whether spoken."""
    if item.get("role") == "assistant":
        return ["assistant", item.get("text", "")]
    return [item.get("role"), item.get("item_id"), item.get("text", ""), "audio" in item]


def _user_item(t: Any) -> dict[str, Any]:
    item = {"role": "user", "item_id": t.item_id, "text": t.text}
    return item if t.audio is None else {**item, "audio": True}


def duplex_pipeline(model: str = "tiny-qwen2.5-omni", resumable: bool = True) -> PipelineConfig:
    """``qwen2.5-omni`` (thinker → talker → token2wav) as a duplex engine: the thinker
    (:mod:`omni_qwen.duplex_speech`, :data:`MAX_MODEL_LEN` tokens, up to :data:`MAX_AUDIO_TURNS`
    audio items per prompt) keeps one resumable request per session; ``resumable=False``: the
    fallback, a fresh thinker request over the whole conversation per response."""
    from omni_core import PipelineConfig
    from omni_qwen import compat
    from omni_qwen.pipelines import omni_pipeline

    data = omni_pipeline(model).model_dump(exclude_unset=True)
    env = {"PYTHONPATH": compat.PORTABLE_PYTHONPATH}
    options = {
        "max_model_len": MAX_MODEL_LEN,
        "max_audio": MAX_AUDIO_TURNS,
        "idle_s": 300,
        "resumable": resumable,
    }
    data["stages"][0].update(
        kind="torch",
        engine_args={"engine": THINKER_ENGINE, "model": model, "env": env, "options": options},
    )
    data.update(
        name=PIPELINE,
        engine="duplex",
        requires_plugins=["qwen", "duplex"],
        duplex={"model": MODEL},
    )
    return PipelineConfig.from_dict(data, source=f"<pipeline {PIPELINE} (omni-qwen)>")


def new_turns(turns: list[Any]) -> dict[str, Any]:
    """The new user turns and the assistant header (what a resumable session appends)."""
    text, audios = "", []
    for t in turns:
        body = AUDIO_PART if t.audio is not None else ""
        if t.audio is not None:
            audios.append((t.audio, INPUT_RATE))
        text += turn("user", body + t.text)
    prompt: dict[str, Any] = {"prompt": text + "<|im_start|>assistant\n"}
    if audios:
        prompt["multi_modal_data"] = {"audio": audios}
    return prompt


def build_resumable_model(pipeline: Any, section: Any) -> Any:
    """The plug of ``qwen2.5-omni-duplex-text``: only the new turns go to the stage, which
    appends them to the session's live request (:mod:`omni_qwen.duplex_resumable`)."""
    from omni_duplex.model import TinyOmniModel

    class QwenOmniResumableModel(TinyOmniModel):
        name = RESUMABLE_MODEL
        input_sample_rate = INPUT_RATE

        def capabilities(self) -> dict[str, Any]:
            return {**super().capabilities(), "output_modalities": ["text"]}

        def plan_response(self, context: Any) -> Any:
            import msgspec
            from omni_duplex.model import ResponsePlan

            from omni_qwen.duplex_resumable import SESSION_KEY

            prompt = new_turns(context.turns)
            prompt["system"] = context.session.instructions or SYSTEM_PROMPT
            params = dict(context.default_params)
            first = params[0]
            changes: dict[str, Any] = {"extra": {**first.extra, SESSION_KEY: context.session_id}}
            if context.session.max_output_tokens is not None:
                changes["max_tokens"] = context.session.max_output_tokens
            params[0] = msgspec.structs.replace(first, **changes)
            return ResponsePlan(prompt, params, ["text"])

    return QwenOmniResumableModel()


def resumable_pipeline(model: str = "tiny-qwen2.5-omni") -> PipelineConfig:
    """One stage: the thinker holding one resumable request per session (text replies)."""
    from omni_core import PipelineConfig
    from omni_qwen import compat

    env = {"PYTHONPATH": compat.PORTABLE_PYTHONPATH}
    return PipelineConfig.from_dict(
        {
            "name": RESUMABLE_PIPELINE,
            "engine": "duplex",
            "requires_plugins": ["qwen", "duplex"],
            "duplex": {"model": RESUMABLE_MODEL},
            "stages": [
                {
                    "id": 0,
                    "name": "thinker",
                    "kind": "torch",
                    "engine_args": {
                        "engine": "omni_qwen.duplex_resumable:build",
                        "model": model,
                        "env": env,
                        "options": {"max_model_len": MAX_MODEL_LEN, "idle_s": 300},
                    },
                    "sampling_params": {"max_tokens": 64, "temperature": 0.0},
                    "final_output": True,
                    "final_output_type": "text",
                }
            ],
        },
        source=f"<pipeline {RESUMABLE_PIPELINE} (omni-qwen)>",
    )
