"""Chat messages and prompt rendering: what turns OpenAI-style messages into a stage's prompt.

The first stage of a pipeline decides how a chat is rendered: a stage kind whose engine has a
tokenizer registers a ``renderer`` (:class:`~omni_core.plugin.types.StageKind`), which renders
messages with the tokenizer's chat template (or a template the stage overrides) and tokenizes the
result, as vLLM's OpenAI server does. Kinds without one get :class:`PlainRenderer`. The server,
the CLI and ``AsyncOmniEngine.generate(messages=...)`` all go through
``OmniEngineBase.render_chat``, so they agree on the prompt and on its token count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from omni_core.errors import RequestError

if TYPE_CHECKING:
    from omni_core.chat_media import MediaBudget
    from omni_core.config.resolve import ResolvedPipeline

logger = logging.getLogger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImageUrl(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImageUrlPart(_Strict):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(_Strict):
    data: str
    format: Literal["wav", "mp3"]


class InputAudioPart(_Strict):
    type: Literal["input_audio"]
    input_audio: InputAudio


ContentPart = Annotated[TextPart | ImageUrlPart | InputAudioPart, Field(discriminator="type")]


class CalledFunction(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Strict):
    """An assistant message's tool call (OpenAI's shape)."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(_Strict):
    """One message of a chat (OpenAI's shape; ``developer`` is rendered as ``system``). An
    assistant message may carry ``tool_calls``; a ``tool`` message answers one by
    ``tool_call_id``."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _tool_fields(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"'tool_calls' is only allowed on assistant messages, not {self.role}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs 'tool_call_id' (the call it answers)")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError(f"'tool_call_id' is only allowed on tool messages, not {self.role}")
        return self

    def template_fields(self) -> dict[str, Any]:
        """The message's tool fields as chat templates read them (vLLM's: a call's
        ``arguments`` as a mapping when they are a JSON object)."""
        out: dict[str, Any] = {}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": call.type,
                    "function": {
                        "name": call.function.name,
                        "arguments": _arguments(call.function.arguments),
                    },
                }
                for call in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    def text(self) -> str:
        """The message's text: a string as is, text parts joined by newlines (as vLLM does)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


def _arguments(text: str) -> Any:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


_MESSAGES: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])


def parse_messages(messages: Any) -> list[ChatMessage]:
    """Messages as given by a caller (dicts or :class:`ChatMessage`) → validated messages."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", param="messages")
    try:
        return _MESSAGES.validate_python(
            [m.model_dump(exclude_none=True) if isinstance(m, ChatMessage) else m for m in messages]
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "messages" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"] if p != "function"
        )
        raise RequestError(f"{where}: {error['msg']}", param=where) from None


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """How a chat is rendered (vLLM's request fields of the same names)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None  # OpenAI's ``tools``, for the template's ``tools``


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """A stage prompt and what it costs: ``num_tokens`` is None where no tokenizer counts it;
    ``messages``: the chat it was rendered from (None for a prompt), kept for the hooks."""

    prompt: Any
    text: str
    num_tokens: int | None
    messages: tuple[ChatMessage, ...] | None = None


class PromptRenderer(Protocol):
    """Renders chats and tokenizes text for a pipeline's first stage (thread-safe, reusable)."""

    stage_name: str
    accepts: frozenset[str]  # content-part types the stage takes ("text", "image_url", ...)
    max_model_len: int | None

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> RenderedPrompt: ...
    def encode(self, text: str, add_special_tokens: bool = True) -> RenderedPrompt: ...
    def tokens(self, token_ids: list[int]) -> RenderedPrompt: ...
    def decode(self, token_ids: list[int]) -> str: ...


def check_parts(messages: list[ChatMessage], renderer: PromptRenderer) -> None:
    """A content part the first stage does not take is a request error naming the part."""
    for i, message in enumerate(messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type not in renderer.accepts:
                    where = f"messages[{i}].content[{j}]"
                    takes = ", ".join(sorted(renderer.accepts))
                    raise RequestError(
                        f"{where}: content part '{part.type}' is not accepted by stage "
                        f"'{renderer.stage_name}' (it takes: {takes})",
                        param=where,
                    )


MEDIA_PARTS = {"audio": "input_audio", "image": "image_url"}  # vLLM's modality → part type


def pipeline_renderer(pipeline: ResolvedPipeline, settings: Any) -> PromptRenderer:
    """The renderer of a pipeline's first stage (its kind's, else :class:`PlainRenderer`); needs
    no started stage, so callers can check a prompt before any stage starts."""
    from omni_core.stage.client import StageContext

    first = pipeline.stages[min(pipeline.stages)]
    if first.kind.renderer is None:
        return PlainRenderer(first.name)
    context = StageContext.bound(pipeline.config.name, settings, pipeline.host)
    renderer: PromptRenderer = first.kind.renderer(first.config, first.args, context)
    return renderer


def _is_file(text: str) -> bool:
    """Whether ``text`` names a file (an inline template longer than a file name is not one)."""
    try:
        return Path(text).is_file()
    except OSError:
        return False


def _audio_rate(model_dir: Path) -> int:
    """The sampling rate the model's feature extractor expects (its processor files), 16 kHz if
    they do not say."""
    import json

    for name, nested in (("processor_config.json", True), ("preprocessor_config.json", False)):
        path = model_dir / name
        if path.is_file():
            config = json.loads(path.read_text())
            config = config.get("feature_extractor", {}) if nested else config
            if isinstance(config.get("sampling_rate"), int):
                return int(config["sampling_rate"])
    return 16000


class PlainRenderer:
    """For stage kinds without a tokenizer: the messages' text joined by newlines (no roles, no
    template) and no token count."""

    accepts = frozenset({"text"})

    def __init__(self, stage_name: str) -> None:
        self.stage_name = stage_name
        self.max_model_len: int | None = None

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> RenderedPrompt:
        check_parts(messages, self)
        text = "\n".join(m.text() for m in messages)
        return RenderedPrompt(text, text, None, tuple(messages))

    def encode(self, text: str, add_special_tokens: bool = True) -> RenderedPrompt:
        return RenderedPrompt(text, text, None)

    def tokens(self, token_ids: list[int]) -> RenderedPrompt:
        return RenderedPrompt(list(token_ids), "", len(token_ids))

    def decode(self, token_ids: list[int]) -> str:
        return ""


class TokenizerRenderer:
    """A Hugging Face tokenizer's chat template (or ``chat_template``: inline Jinja or a file),
    then its encoding without special tokens (the template adds them), as vLLM's server does.

    Prompts become token ids, so the stage receives exactly the counted tokens; prompts of
    ``max_model_len`` tokens or more, and token ids outside the vocabulary, are request errors.
    ``media`` (vLLM's ``limit_mm_per_prompt``, e.g. ``{"audio": 1, "image": 1}``) makes the stage
    take ``input_audio`` / ``image_url`` parts: messages then reach the template as lists of typed
    parts (``{"type": "audio"}`` ...), as vLLM's "openai" content format does, and the decoded
    media travel as the prompt's ``multi_modal_data`` (``num_tokens`` counts the placeholders
    before the stage expands them).
    """

    def __init__(
        self,
        stage_name: str,
        tokenizer_path: str | Path,
        *,
        max_model_len: int | None = None,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        media: dict[str, int] | None = None,
        tool_call_parser: str | None = None,
        budget: MediaBudget | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        self.budget = budget  # what one media part may cost (the engine's settings)
        self.stage_name = stage_name
        self.max_model_len = max_model_len
        self.tool_call_parser = tool_call_parser  # vLLM's --tool-call-parser, for omni serve
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
        self.vocab_size = len(self.tokenizer)
        if chat_template is not None and _is_file(chat_template):
            chat_template = Path(chat_template).read_text()
        self.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        counts = {
            k: v.get("count", 0) if isinstance(v, dict) else v for k, v in (media or {}).items()
        }
        self.media = {k: int(v) for k, v in counts.items() if k in MEDIA_PARTS and v and v > 0}
        self.accepts = frozenset({"text", *(MEDIA_PARTS[k] for k in self.media)})
        self.audio_rate = _audio_rate(Path(tokenizer_path)) if "audio" in self.media else 0

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> RenderedPrompt:
        check_parts(messages, self)
        if options.continue_final_message and options.add_generation_prompt:
            raise RequestError(
                "continue_final_message and add_generation_prompt cannot both be true",
                param="continue_final_message",
            )
        media: dict[str, list[Any]] = {}
        conversation = [
            {
                "role": "system" if m.role == "developer" else m.role,
                "content": self._parts(i, m, media) if self.media else m.text(),
            }
            | ({"name": m.name} if m.name else {})
            | m.template_fields()
            for i, m in enumerate(messages)
        ]
        kwargs = {**self.chat_template_kwargs, **(options.chat_template_kwargs or {})}
        if options.tools:
            kwargs["tools"] = options.tools
        try:
            text = self.tokenizer.apply_chat_template(
                conversation,
                chat_template=self.chat_template,
                add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                tokenize=False,
                **kwargs,
            )
        except Exception as exc:  # a template error is the request's (its kwargs, its messages)
            raise RequestError(
                f"stage '{self.stage_name}': the chat template failed: {exc}", param="messages"
            ) from None
        ids = self.tokenizer.encode(text, add_special_tokens=False, verbose=False)
        rendered = self._checked(ids, text, "messages")
        prompt = {"prompt_token_ids": ids, "multi_modal_data": media} if media else ids
        return RenderedPrompt(prompt, rendered.text, rendered.num_tokens, tuple(messages))

    def _parts(self, i: int, message: ChatMessage, media: dict[str, list[Any]]) -> list[Any]:
        """A message as typed parts for the template; media decoded into ``media``."""
        from omni_core import chat_media

        if not isinstance(message.content, list):
            return [{"type": "text", "text": message.text()}] if message.content else []
        parts: list[Any] = []
        for j, part in enumerate(message.content):
            where = f"messages[{i}].content[{j}]"
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
                continue
            if isinstance(part, InputAudioPart):
                kind = "audio"
                item: Any = (
                    chat_media.decode_audio(
                        part.input_audio.data,
                        part.input_audio.format,
                        self.audio_rate,
                        where,
                        self.budget,
                    ),
                    self.audio_rate,
                )
            else:
                assert isinstance(part, ImageUrlPart)
                kind, item = (
                    "image",
                    chat_media.decode_image(part.image_url.url, where, self.budget),
                )
            media.setdefault(kind, []).append(item)
            if len(media[kind]) > self.media[kind]:
                raise RequestError(
                    f"{where}: stage '{self.stage_name}' takes at most {self.media[kind]} "
                    f"{kind} part(s) per prompt",
                    param=where,
                )
            parts.append({"type": kind})
        return parts

    def encode(self, text: str, add_special_tokens: bool = True) -> RenderedPrompt:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens, verbose=False)
        return self._checked(ids, text, "prompt")

    def tokens(self, token_ids: list[int]) -> RenderedPrompt:
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise RequestError(
                f"prompt: token id {bad[0]} is outside the vocabulary of stage "
                f"'{self.stage_name}' (0..{self.vocab_size - 1})",
                param="prompt",
            )
        return self._checked(list(token_ids), None, "prompt")

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids))

    def _checked(self, ids: list[int], text: str | None, param: str) -> RenderedPrompt:
        if not ids:
            raise RequestError("the prompt is empty (no tokens)", param=param)
        if self.max_model_len is not None and len(ids) >= self.max_model_len:
            raise RequestError(
                f"the prompt is {len(ids)} tokens; stage '{self.stage_name}' takes fewer than its "
                f"max_model_len of {self.max_model_len}",
                param=param,
            )
        return RenderedPrompt(ids, self.decode(ids) if text is None else text, len(ids))
