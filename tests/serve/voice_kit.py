"""A test plugin for the audio user surface, no model needed: a first stage that takes audio and
image content parts (``listener``) and a stage that "speaks" (``speaker``): it turns each token into
a block of samples whose level depends on the voice it was given, and refuses voices it does not
have (a stage's own 400, as a real talker does). ``KIT.seen`` records what each stage received.

``KIT.admit`` (off by default) also refuses an unknown voice in ``omni_admit_request``, before the
request starts: how a model family's plugin makes a bad voice a 400 even for a streamed request.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.chat import ChatMessage, ChatOptions, RenderedPrompt, check_parts
from omni_core.errors import RequestRejected
from omni_core.media import AudioChunk
from omni_core.outputs import ErrorInfo, StageOutput
from omni_core.plugin.types import StageKind
from omni_core.testing.scripted import ScriptedStageClient
from omni_core.testing.scripted_core import ScriptedArgs

RATE = 8000
SAMPLES_PER_TOKEN = 80
LISTEN_RATE = 16000

# thinker (takes media) → talker → speaker (audio out), all in-process and deterministic
PIPELINE = """
name: voice-test
stages:
  - {id: 0, name: thinker, kind: listener, engine_args: {num_tokens: 4}, final_output: true, final_output_type: text}
  - {id: 1, name: talker, kind: listener, inputs: [0], engine_args: {num_tokens: 3}}
  - {id: 2, name: speaker, kind: speaker, inputs: [1], engine_args: {num_tokens: 3, voices: [Chelsie, Ethan]}, final_output: true, final_output_type: audio}
"""
TEXT_ONLY = """
name: text-only
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 3}, final_output: true, final_output_type: text}
"""


class SpeakerArgs(ScriptedArgs):
    voices: list[str] = Field(default_factory=list)


def level(voice: str | None, voices: list[str]) -> float:
    """The sample value a voice speaks at: 0.1 without one, 0.2, 0.3 ... by its place."""
    return 0.1 if voice is None else 0.1 * (voices.index(voice) + 2)


@dataclass
class Kit:
    # (stage, prompt, params.extra) of every request a recording stage received
    seen: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)
    admit: bool = False

    def extras(self, stage: str) -> list[dict[str, Any]]:
        return [extra for name, _, extra in self.seen if name == stage]


KIT = Kit()


class Listener(ScriptedStageClient):
    async def add_request(self, request: Any) -> None:
        KIT.seen.append((self.core.name, request.prompt, dict(request.params.extra)))
        await super().add_request(request)


class Speaker(ScriptedStageClient):
    def __init__(self, label: str, stage_name: str, args: SpeakerArgs) -> None:
        super().__init__(label, stage_name, args)
        self.voices = list(args.voices)
        self.levels: dict[str, float] = {}

    async def add_request(self, request: Any) -> None:
        KIT.seen.append((self.core.name, request.prompt, dict(request.params.extra)))
        voice = request.params.extra.get("voice")
        if voice is not None and voice not in self.voices:
            message = f"stage '{self.core.name}': unknown voice {voice!r} (voices: {self.voices})"
            error = ErrorInfo(type="UnknownVoiceError", message=message, status_code=400)
            self.emit(
                StageOutput(
                    request_id=request.request_id,
                    finished=True,
                    finish_reason="error",
                    error=error,
                )
            )
            return
        self.levels[request.request_id] = level(voice, self.voices)
        await super().add_request(request)

    def emit(self, output: StageOutput) -> None:
        if output.token_ids and output.error is None:
            value = self.levels.get(output.request_id, 0.1)
            samples = np.full(SAMPLES_PER_TOKEN * len(output.token_ids), value, dtype=np.float32)
            output.payload = AudioChunk(samples, RATE)
        super().emit(output)


class ListenerRenderer:
    """Renders a chat as its text; decodes media parts into ``multi_modal_data``."""

    accepts = frozenset({"text", "input_audio", "image_url"})
    max_model_len = None

    def __init__(self, stage_name: str) -> None:
        self.stage_name = stage_name

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> RenderedPrompt:
        from omni_core import chat_media

        check_parts(messages, self)
        media: dict[str, list[Any]] = {}
        for i, message in enumerate(messages):
            for j, part in enumerate(message.content if isinstance(message.content, list) else []):
                where = f"messages[{i}].content[{j}]"
                if part.type == "input_audio":
                    audio = part.input_audio
                    samples = chat_media.decode_audio(audio.data, audio.format, LISTEN_RATE, where)
                    media.setdefault("audio", []).append(samples)
                elif part.type == "image_url":
                    image = chat_media.decode_image(part.image_url.url, where)
                    media.setdefault("image", []).append(np.asarray(image))
        text = "\n".join(m.text() for m in messages)
        prompt: Any = {"prompt": text, "multi_modal_data": media} if media else text
        return RenderedPrompt(prompt, text, len(text.encode()))

    def encode(self, text: str, add_special_tokens: bool = True) -> RenderedPrompt:
        return RenderedPrompt(text, text, len(text.encode()))

    def tokens(self, token_ids: list[int]) -> RenderedPrompt:
        return RenderedPrompt(list(token_ids), "", len(token_ids))

    def decode(self, token_ids: list[int]) -> str:
        return ""


def _listener(stage: Any, replica: int, context: Any) -> Listener:
    return Listener(
        f"listener {replica}", stage.name, ScriptedArgs.model_validate(stage.engine_args)
    )


def _speaker(stage: Any, replica: int, context: Any) -> Speaker:
    return Speaker(f"speaker {replica}", stage.name, SpeakerArgs.model_validate(stage.engine_args))


def plugin() -> types.ModuleType:
    """The kit as a plugin module (register it under any name)."""
    module = types.ModuleType("voice_kit_plugin")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_stage_kinds() -> list[StageKind]:
        return [
            StageKind(
                "listener",
                _listener,
                ScriptedArgs,
                renderer=lambda stage, args, settings: ListenerRenderer(stage.name),
            ),
            StageKind("speaker", _speaker, SpeakerArgs),
        ]

    @hookimpl
    def omni_admit_request(run_id: str, prompt: Any, pipeline: Any, params: Any, port: Any) -> None:
        if not KIT.admit:
            return
        for stage in pipeline.config.stages:
            if stage.kind != "speaker":
                continue
            voice = params[stage.id].extra.get("voice")
            voices = stage.engine_args.get("voices", [])
            if voice is not None and voice not in voices:
                raise RequestRejected(400, f"unknown voice {voice!r} (voices: {voices})")

    module.omni_register_stage_kinds = omni_register_stage_kinds
    module.omni_admit_request = omni_admit_request
    return module
