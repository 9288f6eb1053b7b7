"""``POST /v1/chat/completions``'s body: messages, modalities, audio output, later stages'
sampling fields and tool calling over the shared sampling fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from omni_core.chat import ChatMessage, ChatOptions
from omni_core.grammar import GRAMMAR_FIELD
from omni_core.serve.errors import ApiError
from omni_core.serve.protocol.base import _Body, _Sampling
from omni_core.serve.tools import (
    ToolChoice,
    ToolDef,
    check_tools,
    effective_choice,
    forced_schema,
)


class AudioOptions(_Body):
    """OpenAI's ``audio`` output parameters. ``voice`` reaches every stage as
    ``params.extra["voice"]``: the stages that synthesize speech use it (an unknown voice is
    theirs to refuse, a 400), the others ignore it. ``format``: ``wav`` (whole responses: one WAV
    file) or ``pcm16`` (raw 16-bit mono samples at the pipeline's rate); streamed audio is always
    pcm16 pieces, as OpenAI streams it. Other formats OpenAI names (mp3, flac, opus, aac) are a
    400. Without ``voice`` (OpenAI requires it; here optional) the stages use their default
    voice, as without ``audio``."""

    voice: str | None = Field(default=None, min_length=1)
    format: Literal["wav", "pcm16"] = "wav"


MAX_STAGE_TOKENS = 4096  # a later stage's max_tokens (a talker's frames: transformers' default cap)


class StageSampling(_Body):
    """The sampling fields a chat request may set for a later stage of the pipeline (its
    ``sampling_params``, by stage name: e.g. a talker's ``max_tokens``, the spoken length in
    codec frames), merged over that stage's pipeline defaults; ranges as the first stage's."""

    max_tokens: int | None = Field(default=None, ge=1, le=MAX_STAGE_TOKENS)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)

    def fields(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    modalities: list[Literal["text", "audio"]] | None = Field(default=None, min_length=1)
    audio: AudioOptions | None = None
    # later stages' sampling fields by stage name (omni-core's; vllm-omni has a per-stage list)
    sampling_params: dict[str, StageSampling] | None = None
    # vLLM's chat extras
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    # tool calling (omni_core.serve.tools)
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _tool_checks(self) -> ChatCompletionRequest:
        check_tools(self.tools, self.tool_choice)
        self.check_grammar_size()  # after the tools' checks: a forced call's schema is theirs
        return self

    def structured_output_field(self) -> str | None:
        if self.forced_tool_schema() is None:
            return super().structured_output_field()
        choice = self.effective_tool_choice()
        if isinstance(choice, str):  # required: one schema of every tool's parameters
            return "tools"
        names = [t.function.name for t in self.tools or ()]
        return f"tools[{names.index(choice.function.name)}].function.parameters"

    def effective_tool_choice(self) -> ToolChoice:
        return effective_choice(self.tools, self.tool_choice)

    def forced_tool_schema(self) -> dict[str, Any] | None:
        if not self.tools:
            return None
        return forced_schema(self.tools, self.effective_tool_choice(), self.parallel_tool_calls)

    @model_validator(mode="after")
    def _checks(self) -> ChatCompletionRequest:
        for i, message in enumerate(self.messages):  # vLLM 0.32: only an assistant's may be null
            if message.content is None and message.role != "assistant":
                raise ApiError(
                    400,
                    f"'messages[{i}].content': a {message.role} message needs content (a string "
                    "or a list of parts); only an assistant message's may be null",
                    param="messages",
                )
        if self.audio is not None and "audio" not in (self.modalities or ()):
            raise ApiError(
                400,
                "'audio' is only allowed when 'modalities' includes \"audio\" (it asks for "
                f"{list(self.modalities or ['text'])})",
                param="audio",
            )
        if self.logprob_token_ids and not self.logprobs:
            raise ApiError(
                400,
                "when using 'logprob_token_ids', 'logprobs' must be set to true",
                param="logprob_token_ids",
            )
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        return self

    def max_output_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def request_extra(self) -> dict[str, Any] | None:
        """Request-level fields for every stage's ``params.extra``: the ``voice``, the field of
        the structured output (``extra[GRAMMAR_FIELD]``: what a grammar's 400 names), and with
        ``stream`` and audio asked for, the generic audio option ``stream``
        (``extra[AUDIO_OPTIONS]``, :mod:`omni_core.media`: the audio stage voices pieces as early
        as it can)."""
        from omni_core.media import AUDIO_OPTIONS, audio_options

        audio = self.audio
        out: dict[str, Any] = {"voice": audio.voice} if audio and audio.voice is not None else {}
        if self.stream and "audio" in (self.modalities or ()):
            out[AUDIO_OPTIONS] = audio_options(stream=True)
        field = self.structured_output_field()
        if field is not None:  # what the vllm stage's grammar errors name (omni_core.grammar)
            out[GRAMMAR_FIELD] = field
        return out or None

    def stage_fields(self) -> dict[str, dict[str, Any]]:
        """``sampling_params``: later stages' fields (those the request set) by stage name."""
        return {name: s.fields() for name, s in (self.sampling_params or {}).items()}

    def chat_options(self) -> ChatOptions:
        return ChatOptions(
            add_generation_prompt=self.add_generation_prompt,
            continue_final_message=self.continue_final_message,
            chat_template_kwargs=self.chat_template_kwargs,
            tools=[t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None,
        )
