"""The core's sampling parameters (one object per stage, or one for all stages).

Ranges are declared on the fields and checked when params are parsed or validated, so a bad value
is rejected at the edge (:class:`~omni_core.errors.RequestError` naming the field) instead of in a
stage process. They are the ranges vLLM accepts; every number must be finite.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from omni_core.errors import RequestError

FLOAT_MAX = sys.float_info.max  # an upper bound that rejects inf (and, as every bound, NaN)
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # a signed 64-bit integer (what samplers accept)
MAX_LOGPROBS = 20  # vLLM's default max_logprobs (OpenAI's top_logprobs bound too)

Finite = Annotated[float, msgspec.Meta(ge=-FLOAT_MAX, le=FLOAT_MAX)]
Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
Probability = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, msgspec.Meta(ge=-1, le=SEED_MAX)]  # 0 or -1: disabled (vLLM's convention)
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
RepetitionPenalty = Annotated[float, msgspec.Meta(gt=0.0, le=FLOAT_MAX)]
Seed = Annotated[int, msgspec.Meta(ge=SEED_MIN, le=SEED_MAX)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=SEED_MAX)]
Logprobs = Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)]
Seconds = Annotated[float, msgspec.Meta(gt=0.0, le=FLOAT_MAX)]
StopString = Annotated[str, msgspec.Meta(min_length=1)]


class SamplingParams(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Sampling parameters for one stage.

    ``n`` > 1 fans the request out into parallel-sampling children (a pipeline-level setting: the
    value given for the first stage counts; the engine bounds it by ``OMNI_MAX_N``).
    ``deadline_s`` aborts the request with ``finish_reason="timeout"`` when it expires.
    ``top_k`` None, 0 or -1 disables top-k; ``min_p`` 0 disables min-p; the penalties' defaults
    (0, 0, 1) apply none. ``extra`` carries engine-specific fields that stage kinds may read
    (e.g. vLLM's own sampling fields); it is not checked here: the stage kind checks it.

    A request's params for a stage, given as a mapping (``generate(sampling_params={"talker":
    {"max_tokens": 32}})``, ``omni run --max-tokens``, an HTTP request's fields), are merged over
    the stage's pipeline defaults field by field (``extra`` key by key): fields the request leaves
    out keep the pipeline's values. A ``SamplingParams`` object is taken whole (it cannot say
    which fields were left out).
    """

    max_tokens: Positive | None = None
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    top_k: TopK | None = None
    min_p: Probability = 0.0
    frequency_penalty: Penalty = 0.0
    presence_penalty: Penalty = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    seed: Seed | None = None
    stop: list[StopString] = msgspec.field(default_factory=list)
    n: Positive = 1
    logprobs: Logprobs | None = None
    deadline_s: Seconds | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def validate(self, where: str = "sampling_params") -> SamplingParams:
        """These params, checked (types and ranges); raises RequestError naming the field.

        Params built in Python skip the checks of parsing: this runs them.
        """
        return type(self)._parse(msgspec.structs.asdict(self), where)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "sampling_params") -> SamplingParams:
        return cls._parse(data, where)

    @classmethod
    def _parse(cls, data: Any, where: str) -> SamplingParams:
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            line, field = _problem(where, data, str(exc))
            raise RequestError(line, param=field) from None

    def updated(self, fields: Mapping[str, Any], where: str = "sampling_params") -> SamplingParams:
        """These params (a stage's defaults) with ``fields`` (a request's) over them, field by
        field, ``extra`` key by key; checked, a bad field named as ``{where}.field``. The one
        merge of a request's params over a stage's defaults (Python API, CLI and server)."""
        if not isinstance(fields, Mapping):
            raise RequestError(f"{where} must be a mapping, not {type(fields).__name__}")
        data = msgspec.structs.asdict(self)
        data.update(fields)
        extra = fields.get("extra")
        if isinstance(extra, Mapping):
            data["extra"] = {**self.extra, **extra}
        return type(self)._parse(data, where)

    def merged(self, overrides: dict[str, Any]) -> SamplingParams:
        return msgspec.structs.replace(self, **overrides)

    def with_extra(self, extra: dict[str, Any]) -> SamplingParams:
        """A copy whose ``extra`` is this one's with ``extra``'s keys over it (e.g. a request's
        ``{"voice": "Ethan"}`` over a stage's pipeline defaults)."""
        return msgspec.structs.replace(self, extra={**self.extra, **extra})


def _problem(where: str, data: Any, message: str) -> tuple[str, str | None]:
    """msgspec's "Expected `float` <= 2.0 - at `$.temperature`" → one line naming the field and
    the value that was given, and the field's name (an HTTP error's ``param``)."""
    text, sep, path = message.rpartition(" - at `$")
    if not sep:
        return f"{where}: {message}", None
    path = path.rstrip("`")
    line = f"{where}{path}: {text[:1].lower()}{text[1:]}"
    name = path.lstrip(".").split("[", 1)[0]
    if isinstance(data, dict) and name in data:
        value = repr(data[name])
        line += f" (value: {value if len(value) <= 80 else value[:77] + '...'})"
    return line, name or None


# vLLM's sampling extras, as its OpenAI server (0.32) accepts them on chat and completion
# requests: the one mapping from a request's field to the field of vLLM's ``SamplingParams`` it
# sets. ``omni serve`` passes the fields a request sets to a vllm first stage as
# ``extra["vllm"]`` (their types and vLLM's own request checks are in
# :mod:`omni_core.serve.protocol`; vLLM's ``SamplingParams`` checks the values, as on vLLM's
# server); a first stage of another kind refuses them (a 400 naming the field and the kind).
VLLM_SAMPLING_EXTRAS: dict[str, str] = {
    "min_tokens": "min_tokens",
    "ignore_eos": "ignore_eos",
    "stop_token_ids": "stop_token_ids",
    "include_stop_str_in_output": "include_stop_str_in_output",
    "skip_special_tokens": "skip_special_tokens",
    "spaces_between_special_tokens": "spaces_between_special_tokens",
    "prompt_logprobs": "prompt_logprobs",
    "logprob_token_ids": "logprob_token_ids",
    "allowed_token_ids": "allowed_token_ids",
    "bad_words": "bad_words",
    "logit_bias": "logit_bias",
    "watermarking": "watermarking",
    "stream_interval": "stream_interval",
    "thinking_token_budget": "thinking_token_budget",
    "repetition_detection": "repetition_detection",
    "structured_outputs": "structured_outputs",
    "vllm_xargs": "extra_args",
}
