"""The core's sampling parameters (one object per stage, or one for all stages)."""

from __future__ import annotations

from typing import Any

import msgspec

from omni_core.errors import RequestError


class SamplingParams(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Sampling parameters for one stage.

    ``n`` > 1 fans the request out into parallel-sampling children (a pipeline-level setting: the
    value given for the first stage counts). ``deadline_s`` aborts the request with
    ``finish_reason="timeout"`` when it expires. ``extra`` carries engine-specific fields that
    stage kinds may read (e.g. vLLM's own sampling fields).
    """

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = msgspec.field(default_factory=list)
    n: int = 1
    logprobs: int | None = None
    deadline_s: float | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def validate(self, where: str = "sampling_params") -> SamplingParams:
        problems = []
        if self.n < 1:
            problems.append(f"{where}.n must be >= 1 (got {self.n})")
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append(f"{where}.max_tokens must be >= 1 (got {self.max_tokens})")
        if self.temperature < 0:
            problems.append(f"{where}.temperature must be >= 0 (got {self.temperature})")
        if self.deadline_s is not None and self.deadline_s <= 0:
            problems.append(f"{where}.deadline_s must be > 0 (got {self.deadline_s})")
        if self.logprobs is not None and self.logprobs < 0:
            problems.append(f"{where}.logprobs must be >= 0 (got {self.logprobs})")
        if problems:
            raise RequestError("; ".join(problems))
        return self

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "sampling_params") -> SamplingParams:
        try:
            return msgspec.convert(data, cls).validate(where)
        except msgspec.ValidationError as exc:
            raise RequestError(f"{where}: {exc}") from None

    def merged(self, overrides: dict[str, Any]) -> SamplingParams:
        return msgspec.structs.replace(self, **overrides)
