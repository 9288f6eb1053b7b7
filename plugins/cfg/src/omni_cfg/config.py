"""The ``cfg:`` pipeline section, per-request overrides and the guided stage of a pipeline.

Weights (Σ = 1, so guidance scale 1 with no branches is exactly the unguided result)::

    eps = eps_neg + s * (eps_parent - eps_neg) + Σ_b s_b * (eps_b - eps_neg)
        = s * eps_parent + Σ_b s_b * eps_b + (1 - s - Σ_b s_b) * eps_neg
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from omni_cfg.errors import CfgError

if TYPE_CHECKING:
    from collections.abc import Collection

    from omni_core import PipelineConfig, SamplingParams
    from omni_core.plugin import PipelineView

SECTION = "cfg"  # the pipeline section and the key in SamplingParams.extra
# what a guided stage's kind declares it accepts (StageKind.accepts): weighted conditionings
CONDITIONINGS = "conditionings"
# validating a section (kinds not resolved yet): the kind guided without ``stage:``
GUIDED_KIND = "diffusers"
NEGATIVE = "neg"  # role of the negative-prompt companion
MAX_BRANCHES = 8  # each branch is a whole hidden request: a section's max_branches, at most
# override fields that ask for guidance on a pipeline whose section is disabled
ASKING = frozenset({"guidance_scale", "negative_prompt", "branches"})


class Branch(BaseModel):
    """An extra guidance branch: one more companion with its own prompt and scale."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    prompt: str
    scale: float = Field(allow_inf_nan=False)


class CfgSection(BaseModel):
    """``cfg:`` in a pipeline. Every field may be overridden per request (except ``stage``).

    ``enabled: false``: a request is unguided unless it asks for guidance (its override sets
    ``enabled: true``, or ``guidance_scale``, ``negative_prompt`` or ``branches``); the other
    fields are then its defaults.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    stage: str | None = Field(
        default=None, description=f"guided stage name (default: the '{GUIDED_KIND}' stage)"
    )
    guidance_scale: float = Field(default=3.0, ge=0, allow_inf_nan=False)
    negative_prompt: str = ""
    branches: tuple[Branch, ...] = Field(
        default=(),
        max_length=MAX_BRANCHES,
        description="extra weighted conditionings (each one a hidden request)",
    )
    timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    max_branches: int = Field(
        default=MAX_BRANCHES,
        ge=0,
        le=MAX_BRANCHES,
        description="most branches a request (or this section) may give; not overridable",
    )
    share_media: bool = Field(
        default=False,
        description="a companion's text prompt carries the request's multi_modal_data (an "
        "edit's input image, which the negative prompt is encoded with); not overridable",
    )

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> CfgSection:
        if len(self.branches) > self.max_branches:
            raise ValueError(
                f"branches: {len(self.branches)} given, at most max_branches={self.max_branches}"
            )
        names = [b.name for b in self.branches]
        dupes = sorted({n for n in names if names.count(n) > 1 or n == NEGATIVE})
        if dupes:
            raise ValueError(f"branch names must be unique and not '{NEGATIVE}': {dupes}")
        pipeline = (info.context or {}).get("pipeline")
        if pipeline is not None and (self.enabled or self.stage is not None):
            guided_target(pipeline, self.stage, strict=True)
        return self


class CfgOverride(BaseModel):
    """``sampling_params.extra["cfg"]`` of a request; ``companion_params`` are SamplingParams
    fields set on the companions only (e.g. their own ``max_tokens`` or ``seed``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    guidance_scale: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    negative_prompt: str | None = None
    branches: tuple[Branch, ...] | None = Field(default=None, max_length=MAX_BRANCHES)
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    companion_params: dict[str, Any] = Field(default_factory=dict)


def conditioning_kinds(pipeline: PipelineView) -> set[str]:
    """The kinds of the pipeline's stages that accept weighted conditionings (the capability
    a stage kind declares in ``StageKind.accepts``; no kind name is assumed)."""
    return {s.config.kind for s in pipeline.stages.values() if CONDITIONINGS in s.kind.accepts}


@dataclass(frozen=True)
class Target:
    """The guided stage and the stage feeding it (where companions run up to)."""

    stage: int
    source: int


def guided_target(
    pipeline: PipelineConfig,
    stage_name: str | None,
    *,
    strict: bool,
    guided_kinds: Collection[str] = (GUIDED_KIND,),
) -> Target | None:
    """The stage to guide: ``stage_name``, else the pipeline's only stage of a kind in
    ``guided_kinds`` (on a running pipeline: the kinds whose ``StageKind.accepts`` has
    ``"conditionings"``, :func:`conditioning_kinds`; validating a section, before kinds resolve:
    ``diffusers``, omni-qwen-image's).

    It must have exactly one ``on_finish`` input. ``strict``: a problem raises ValueError (the
    section asked for guidance); otherwise the pipeline is just not guided.
    """
    if stage_name is not None:
        stages = [s for s in pipeline.stages if s.name == stage_name]
        if not stages:
            known = ", ".join(s.name for s in pipeline.stages)
            raise ValueError(f"stage: no stage named '{stage_name}' (stages: {known})")
    else:
        stages = [s for s in pipeline.stages if s.kind in guided_kinds]
        if len(stages) != 1:
            if strict:
                raise ValueError(
                    f"stage: name the guided stage (the pipeline has {len(stages)} "
                    f"'{GUIDED_KIND}' stages)"
                )
            return None
    stage = stages[0]
    if len(stage.inputs) != 1 or stage.inputs[0].mode != "on_finish":
        if strict:
            raise ValueError(
                f"stage: guided stage '{stage.name}' needs exactly one on_finish input "
                "(the stage its companions run through)"
            )
        return None
    return Target(stage=stage.id, source=stage.inputs[0].stage)


@dataclass(frozen=True)
class Options:
    """The guidance of one request: section defaults with its overrides applied."""

    guidance_scale: float
    negative_prompt: str
    branches: tuple[Branch, ...]
    timeout_s: float
    companion_params: dict[str, Any]

    def weights(self) -> tuple[float, dict[str, float]]:
        """(parent weight, weight by companion role)."""
        roles = {b.name: b.scale for b in self.branches}
        negative = 1.0 - self.guidance_scale - sum(roles.values())
        return self.guidance_scale, {NEGATIVE: negative, **roles}


def request_options(
    section: CfgSection, params: dict[int, SamplingParams], request_id: str
) -> Options | None:
    """Options for a request, or None when guidance is off for it. Raises CfgError."""
    raw = next((p.extra[SECTION] for p in params.values() if SECTION in p.extra), None)
    _check_branch_count(raw, section.max_branches, request_id)
    try:
        override = CfgOverride.model_validate(raw or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or SECTION}: {e['msg']}" for e in exc.errors()
        )
        raise CfgError(
            f"request '{request_id}': invalid extra['{SECTION}'] override: {problems}"
        ) from None
    asked = bool(override.model_fields_set & ASKING)  # guidance asked for by its fields
    enabled = (section.enabled or asked) if override.enabled is None else override.enabled
    if not enabled:
        return None
    options = Options(
        guidance_scale=_pick(override.guidance_scale, section.guidance_scale),
        negative_prompt=_pick(override.negative_prompt, section.negative_prompt),
        branches=_pick(override.branches, section.branches),
        timeout_s=_pick(override.timeout_s, section.timeout_s),
        companion_params=override.companion_params,
    )
    names = [b.name for b in options.branches]
    if len(set(names)) != len(names) or NEGATIVE in names:
        raise CfgError(f"request '{request_id}': branch names must be unique and not '{NEGATIVE}'")
    if not math.isfinite(sum(options.weights()[1].values())):
        raise CfgError(f"request '{request_id}': guidance weights are not finite")
    return options


def _check_branch_count(raw: Any, limit: int, request_id: str) -> None:
    """Refuse an override with too many branches before any of them is validated."""
    branches = raw.get("branches") if isinstance(raw, dict) else None
    if isinstance(branches, list | tuple) and len(branches) > limit:
        raise CfgError(
            f"request '{request_id}': extra['{SECTION}'].branches: {len(branches)} given, at "
            f"most {limit} (the pipeline's {SECTION}.max_branches; each branch is a hidden request)"
        )


def check_work(options: Options, n: int, max_n: int, request_id: str) -> None:
    """Every parallel sample runs with its companions: ``n * (1 + companions)`` runs, counted
    against OMNI_MAX_N like parallel samples. Raises CfgError."""
    companions = 1 + len(options.branches)
    runs = n * (1 + companions)
    if runs > max_n:
        raise CfgError(
            f"request '{request_id}': n={n} guided samples with {companions} hidden companion "
            f"request(s) each (negative prompt + {len(options.branches)} branches) are {runs} "
            f"runs, at most {max_n} (OMNI_MAX_N counts every run)"
        )


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value
