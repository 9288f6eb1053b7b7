"""The base of every request body (unknown fields rejected, OpenAI's unsupported fields a 400)
and the sampling fields both text routes share (OpenAI's, plus vLLM's extras).

Each request maps its sampling fields onto the first stage's
:class:`~omni_core.sampling.SamplingParams` (vLLM's semantics; validated there).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from omni_core.grammar import GrammarError, check_size, spec_kind
from omni_core.sampling import VLLM_SAMPLING_EXTRAS
from omni_core.serve.errors import ApiError

# Fields OpenAI defines that change what a response means and that omni-core does not implement:
# a 400 naming the field rather than a silently different answer.
UNSUPPORTED = {
    "functions": "function calling (deprecated by OpenAI; use 'tools')",
    "function_call": "function calling",
    "prediction": "predicted outputs",
    "reasoning_effort": "reasoning models",
    "web_search_options": "web search",
    "suffix": "suffix (insertion)",
    "best_of": "best_of",
    "truncate_prompt_tokens": "prompt truncation (vLLM's truncate_prompt_tokens)",
    "truncation_side": "prompt truncation (vLLM's truncate_prompt_tokens)",
    "cache_salt": "prefix-cache salting (vLLM's cache_salt)",
    **{
        f"guided_{name}": "vLLM's guided_* fields (removed in vLLM; use 'structured_outputs' or "
        "'response_format')"
        for name in ("json", "regex", "choice", "grammar", "decoding_backend", "whitespace_pattern")
    },
}
# ``vllm_xargs`` keys vLLM's engine reads as objects of its KV / encoder-cache connectors (which
# omni-core does not configure): any value there failed inside vLLM (an AttributeError, a 500).
TRANSFER_XARGS = frozenset({"kv_transfer_params", "ec_transfer_params"})
# Fields OpenAI clients may send that do not change the result: accepted and ignored.
IGNORED = ("user", "metadata", "store", "service_tier")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ignored: ClassVar[tuple[str, ...]] = IGNORED

    @model_validator(mode="before")
    @classmethod
    def _unsupported(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, what in UNSUPPORTED.items():
                if data.get(name) is not None:
                    raise ApiError(400, f"'{name}': {what} is not supported", param=name)
            return {k: v for k, v in data.items() if k not in cls.ignored}
        return data


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(BaseModel):
    """OpenAI's ``response_format.json_schema`` (``schema`` in the body)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: text, or JSON (any object, or one schema) through the vllm
    stage's structured-output backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ApiError(
                400,
                "When response_format type is 'json_schema', the 'json_schema' field must be "
                "provided.",
                param="response_format",
            )
        return self


class _Sampling(_Body):
    """The sampling fields both text routes share (OpenAI's, plus vLLM's extras)."""

    model: str | None = None  # omitted: the served model (vLLM's)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1)
    # vLLM's sampling extras (types as vLLM's server declares them; VLLM_SAMPLING_EXTRAS maps
    # them onto vLLM's SamplingParams, which checks their values)
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    logit_bias: dict[str, float] | None = None
    watermarking: bool | None = None
    stream_interval: int | None = Field(default=None, ge=1)
    thinking_token_budget: int | None = None
    repetition_detection: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    response_format: ResponseFormat | None = None
    # vLLM's request extras that are no sampling fields
    return_token_ids: bool | None = None
    request_id: str | None = Field(default=None, min_length=1)
    priority: int = 0
    use_beam_search: bool = False
    length_penalty: float = 1.0

    _SAMPLING: ClassVar[tuple[str, ...]] = (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "seed",
    )

    def overrides(self) -> dict[str, Any]:
        """The request's sampling fields as SamplingParams fields (only those it set)."""
        out: dict[str, Any] = {
            f: getattr(self, f) for f in self._SAMPLING if getattr(self, f) is not None
        }
        if self.n != 1:
            out["n"] = self.n
        max_tokens = self.max_output_tokens()
        if max_tokens is not None:
            out["max_tokens"] = max_tokens
        if self.stop is not None:
            out["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        logprobs = self.num_logprobs()
        if logprobs is not None and not self.logprob_token_ids:  # vLLM: those ids, not top-k
            out["logprobs"] = logprobs
        return out

    def vllm_extras(self) -> dict[str, Any]:
        """The vLLM sampling extras this request set, as vLLM ``SamplingParams`` fields."""
        out = {
            vllm: getattr(self, name)
            for name, vllm in VLLM_SAMPLING_EXTRAS.items()
            if getattr(self, name) is not None
        }
        structured = self.structured_output()
        if structured is not None:
            out["structured_outputs"] = structured
        return out

    def structured_output(self) -> dict[str, Any] | None:
        """``structured_outputs`` with ``response_format`` over it (vLLM's
        ``structured_outputs_from_response_format``); a ``required`` or named ``tool_choice``
        replaces both with its tools' schema (as vLLM's tool parsers do)."""
        forced = self.forced_tool_schema()
        if forced is not None:
            return {"json": forced}
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return self.structured_outputs
        if fmt.type == "json_object":
            over: dict[str, Any] = {"json_object": True}
        else:
            assert fmt.json_schema is not None
            over = {"json": fmt.json_schema.json_schema}
        return {**(self.structured_outputs or {}), **over}

    def forced_tool_schema(self) -> dict[str, Any] | None:
        return None

    def structured_output_field(self) -> str | None:
        """The request's field that :meth:`structured_output` comes from (its errors name it):
        ``response_format.json_schema``, ``structured_outputs.<kind>``, or the tools'."""
        spec = self.structured_output()
        if spec is None:
            return None
        kind = spec_kind(spec)
        fmt = self.response_format
        if fmt is not None and fmt.type != "text" and kind in ("json", "json_object"):
            return "response_format.json_schema" if kind == "json" else "response_format"
        return f"structured_outputs.{kind}" if kind else "structured_outputs"

    def check_grammar_size(self) -> None:
        """The structured output's size bounds (:mod:`omni_core.grammar`), before anything
        compiles it: a 400 naming the request's field."""
        spec = self.structured_output()
        if spec is None:
            return
        try:
            check_size(spec, self.structured_output_field())
        except GrammarError as exc:
            raise ApiError(400, str(exc), param=exc.param) from None

    def vllm_extra_names(self) -> list[str]:
        """The request's fields that only a vllm first stage can honour."""
        names = [n for n in VLLM_SAMPLING_EXTRAS if getattr(self, n) is not None]
        if self.forced_tool_schema() is not None:
            names.insert(0, "tool_choice")
        if self.structured_output() is not None and "structured_outputs" not in names:
            names.append("response_format")
        return names

    def max_output_tokens(self) -> int | None:
        return self.max_tokens

    def num_logprobs(self) -> int | None:
        return None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        """Usage in every chunk (vLLM's: with ``include_usage`` only)."""
        options = self.stream_options
        return options is not None and options.include_usage and options.continuous_usage_stats

    @field_validator("stop")
    @classmethod
    def _few_stop_strings(cls, stop: str | list[str] | None) -> str | list[str] | None:
        """At most ``VLLM_MAX_STOP_STRINGS`` (4, OpenAI's limit too) stop strings, as vLLM 0.32's
        server (its ``StopParam``; the variable read the same way, without importing vLLM)."""
        limit = int(os.environ.get("VLLM_MAX_STOP_STRINGS", "4"))
        if isinstance(stop, list) and len(stop) > limit:
            raise ApiError(
                400,
                f"'stop': {len(stop)} stop strings; at most {limit} (VLLM_MAX_STOP_STRINGS)",
                param="stop",
            )
        return stop

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise ApiError(
                400,
                "'stream_options' is only allowed when 'stream' is true",
                param="stream_options",
            )
        return self

    @model_validator(mode="after")
    def _vllm_checks(self) -> _Sampling:
        """vLLM's own request checks of its extras (its protocol models' validators)."""
        if self.prompt_logprobs is not None:
            if self.stream and (self.prompt_logprobs > 0 or self.prompt_logprobs == -1):
                raise ApiError(
                    400,
                    "'prompt_logprobs' are not available when 'stream' is true",
                    param="prompt_logprobs",
                )
            if self.prompt_logprobs < -1:
                raise ApiError(
                    400, "'prompt_logprobs' must be a positive value or -1", param="prompt_logprobs"
                )
        if self.structured_outputs is not None:
            kinds = [k for k in ("json", "regex", "choice") if self.structured_outputs.get(k)]
            if len(kinds) > 1:
                raise ApiError(
                    400,
                    "'structured_outputs': only one kind of constraint ('json', 'regex' or "
                    f"'choice') per request, got {kinds}",
                    param="structured_outputs",
                )
        if self.use_beam_search:
            raise ApiError(
                400, "'use_beam_search': beam search is not supported", param="use_beam_search"
            )
        if self.length_penalty != 1.0:
            raise ApiError(
                400,
                "'length_penalty' applies to beam search only, which is not supported",
                param="length_penalty",
            )
        if self.priority != 0:
            raise ApiError(
                400,
                "'priority': this server does not use priority scheduling (only 0 is allowed)",
                param="priority",
            )
        taken = sorted(TRANSFER_XARGS & set(self.vllm_xargs or ()))
        if taken:
            raise ApiError(
                400,
                f"'vllm_xargs.{taken[0]}': vLLM reads it for KV/encoder-cache transfer between "
                "servers (disaggregated prefill, a KV connector), which omni-core's vllm stages "
                "do not run; it cannot be set",
                param="vllm_xargs",
            )
        return self
