"""The model plug: how a pipeline's stages serve a session.

A :class:`DuplexModel` decides how committed user input becomes one stage request (prompt,
sampling params, wanted modalities) and how that request's outputs become session events (text
and audio deltas). Plugins register more through the hook ``omni_duplex_register_models``
(see :mod:`omni_duplex.hookspecs`); a pipeline picks one with ``duplex: {model: NAME}``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core import ConfigError, PluginConflictError, PluginError

from omni_duplex.config import WIRE_SAMPLE_RATE

if TYPE_CHECKING:
    from omni_core import OmniRequestOutput, SamplingParams
    from omni_core.plugin import PipelineView, PluginHost

    from omni_duplex.config import DuplexSection, SessionConfig

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class UserTurn:
    """One committed user turn: audio at the model's input rate (float32) and/or text."""

    item_id: str
    audio: Any = None
    text: str = ""
    audio_ms: float = 0.0


@dataclass(slots=True)
class ResponsePlan:
    """One stage request: ``modalities`` selects the final stages (None: all of them)."""

    prompt: Any
    params: dict[int, SamplingParams] | None = None
    modalities: list[str] | None = None


@dataclass(slots=True)
class Delta:
    kind: str  # "text" | "audio" (audio: pcm16 bytes at the wire rate)
    value: Any


@dataclass(slots=True)
class ResponseContext:
    """What a model sees while planning a response."""

    session: SessionConfig
    turns: list[UserTurn]
    history: list[dict[str, Any]] = field(default_factory=list)
    default_params: dict[int, SamplingParams] = field(default_factory=dict)
    stage_names: dict[int, str] = field(default_factory=dict)
    session_id: str = ""  # the session's id (a plug keeping per-session state in a stage)


class DuplexModel(ABC):
    """How a pipeline serves sessions. Instances are shared by all sessions of an engine."""

    name: str = ""
    input_sample_rate: int = 16_000
    # True: the history keeps each spoken user turn's audio (``"audio"``, at the input rate) for
    # plan_response; False: text only
    keeps_audio: bool = False
    # True: renders tool calls and their outputs (session tools, omni_duplex.tools)
    supports_tools: bool = False
    # True: plan_response blocks (tokenizes): sessions call it in a worker thread
    plans_off_loop: bool = False
    # the voices a session may choose (``session.audio.output.voice``, read by plan_response
    # from ``context.session.voice``); empty: the model speaks with one voice, none to choose
    voices: tuple[str, ...] = ()

    def bind(self, engine: Any) -> None:
        """Called once by the engine that loaded the plug, before any session (its
        ``prompt_renderer``, ``render_chat``, ...)."""
        return None

    def tool_parser(self) -> tuple[type | None, Any, str]:
        """vLLM's tool-call parser class for ``auto`` tool choice (None: none set), the tokenizer
        it reads, and where the parser is set (for errors)."""
        return None, None, "none set"

    def validate_pipeline(self, pipeline: PipelineView) -> list[str]:
        """Problems (one line each) that keep this pipeline from serving sessions."""
        return []

    def capabilities(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "input_sample_rate_hz": WIRE_SAMPLE_RATE,
            "output_sample_rate_hz": WIRE_SAMPLE_RATE,
            "turn_detection": ["server_vad", None],
            "barge_in": True,
        }

    @abstractmethod
    def plan_response(self, context: ResponseContext) -> ResponsePlan:
        """Committed turns (and history) → one stage request."""

    @abstractmethod
    def project(self, output: OmniRequestOutput) -> list[Delta]:
        """One output of the response's request → the deltas it carries."""


class TinyOmniModel(DuplexModel):
    """The built-in plug for ``tiny-omni``-shaped pipelines: a text prompt in, the text stage's
    tokens as text deltas and the audio stage's :class:`~omni_core.media.AudioChunk` payloads as
    audio deltas (resampled to the wire rate).

    The tiny thinker reads text only, so a spoken turn reaches it as a short description of the
    audio (duration and level); typed text goes in verbatim.
    """

    name = "tiny-omni"
    input_sample_rate = 16_000

    def validate_pipeline(self, pipeline: PipelineView) -> list[str]:
        finals = {
            s.config.final_output_type for s in pipeline.stages.values() if s.config.final_output
        }
        if "text" not in finals:
            return [
                f"{pipeline.config.source}: duplex model '{self.name}' needs a final stage "
                f"with final_output_type 'text' (found: {sorted(finals)})"
            ]
        return []

    def plan_response(self, context: ResponseContext) -> ResponsePlan:
        parts = []
        if context.session.instructions:
            parts.append(context.session.instructions)
        for turn in context.turns:
            if turn.text:
                parts.append(turn.text)
            if turn.audio is not None and turn.audio_ms:
                parts.append(f"(the user spoke for {turn.audio_ms / 1000:.1f} seconds)")
        prompt = "\n".join(parts) or "Hello."
        params = dict(context.default_params)
        limit = context.session.max_output_tokens
        if limit is not None and params:
            first = min(params)
            import msgspec

            params[first] = msgspec.structs.replace(params[first], max_tokens=limit)
        wants_audio = "audio" in context.session.output_modalities
        return ResponsePlan(prompt, params, None if wants_audio else ["text"])

    def project(self, output: OmniRequestOutput) -> list[Delta]:
        from omni_core.extend import AudioChunk

        deltas = []
        if output.output_type == "text" and output.text and not output.finish_reason == "abort":
            deltas.append(Delta("text", output.text))
        payload = output.payload
        if isinstance(payload, AudioChunk):
            from omni_duplex.audio import encode_pcm16, resample

            samples = resample(payload.samples, payload.sample_rate, WIRE_SAMPLE_RATE)
            deltas.append(Delta("audio", encode_pcm16(samples)))
        return deltas


@dataclass(frozen=True, slots=True)
class DuplexModelSpec:
    """A registered model plug: ``factory(pipeline, section)`` builds it for one engine."""

    name: str
    factory: Callable[[PipelineView, DuplexSection], DuplexModel]
    description: str = ""


def registered_models(host: PluginHost) -> dict[str, DuplexModelSpec]:
    found: dict[str, tuple[str, DuplexModelSpec]] = {}
    # through pluggy's own caller (wrappers and tracing apply), each result with its plugin
    for plugin, specs in host.results_by_plugin("omni_duplex_register_models"):
        for spec in specs or ():
            if not isinstance(spec, DuplexModelSpec):
                raise PluginError(
                    f"plugin '{plugin}': omni_duplex_register_models returned "
                    f"{type(spec).__name__}, expected DuplexModelSpec"
                )
            if spec.name in found:
                raise PluginConflictError(
                    f"duplex model '{spec.name}' is provided by two plugins: "
                    f"'{found[spec.name][0]}' and '{plugin}'"
                )
            found[spec.name] = (plugin, spec)
    return {name: spec for name, (_, spec) in found.items()}


def load_model(host: PluginHost, pipeline: PipelineView, section: DuplexSection) -> DuplexModel:
    specs = registered_models(host)
    spec = specs.get(section.model)
    where = f"{pipeline.config.source}: section 'duplex', field 'model'"
    if spec is None:
        known = ", ".join(sorted(specs)) or "none"
        raise ConfigError([f"{where}: unknown duplex model '{section.model}' (known: {known})"])
    model = spec.factory(pipeline, section)
    if not isinstance(model, DuplexModel):
        raise PluginError(f"duplex model '{spec.name}': factory returned {type(model).__name__}")
    problems = model.validate_pipeline(pipeline)
    if problems:
        raise ConfigError(problems)
    return model
