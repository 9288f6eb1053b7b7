"""The hook implementations omni-core loads (entry point ``cfg`` → this module).

Cheap to import: it is imported whenever a plugin manager is built. The state lives on the
plugin's object per pipeline: ``omni_pipeline_plugin`` returns a :class:`GuidedPipeline` (a
:class:`Guide` for that engine) for a guided pipeline and nothing for one that is not, so its
hooks take part in the guided pipeline only (no module-global state, no lookup per hook). Only
the public API: the hooks' request views and ``port``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from omni_cfg.config import SECTION, CfgSection, conditioning_kinds, guided_target
from omni_core.plugin import Admission, ConfigSection, ForwardGate, RunOption, hookimpl

if TYPE_CHECKING:
    from omni_cfg.guide import Guide
    from omni_core import ErrorInfo, SamplingParams, StageOutput
    from omni_core.plugin import OrchestratorPort, PipelineView, RequestView

OMNI_PLUGIN_API_VERSION = 3


class GuidedPipeline:
    """The plugin's object for one guided pipeline: its hooks, over that engine's Guide."""

    def __init__(self, guide: Guide) -> None:
        self.guide = guide

    @hookimpl
    def omni_background_tasks(self) -> Iterable[Callable[[], Awaitable[None]]]:
        return [self.guide.reaper]

    @hookimpl
    def omni_admit_request(
        self, run_id: str, request: RequestView, params: dict[int, SamplingParams]
    ) -> Admission | None:
        return self.guide.admit(run_id, params, request.request_id, request.prompt)

    @hookimpl
    def omni_request_admitted(self, request: RequestView) -> None:
        self.guide.admitted(request)

    @hookimpl
    def omni_stage_output(self, request: RequestView, stage_id: int, output: StageOutput) -> None:
        # an observer: it fires after the output is recorded in request.stages[stage_id].result
        self.guide.on_output(request, stage_id, output)

    @hookimpl
    def omni_forward_gate(self, run_id: str, stage_id: int) -> ForwardGate | None:
        return self.guide.gate(run_id, stage_id)

    @hookimpl
    def omni_expand_abort(self, request_ids: list[str]) -> Iterable[str]:
        return self.guide.abort_targets(request_ids)

    @hookimpl
    def omni_request_terminal(
        self, run_id: str, finish_reason: str, error: ErrorInfo | None
    ) -> None:
        self.guide.terminal(run_id, finish_reason, error)


@hookimpl
def omni_pipeline_plugin(pipeline: PipelineView, port: OrchestratorPort) -> GuidedPipeline | None:
    """The pipeline's :class:`GuidedPipeline`; None when it is not guided.

    A pipeline is guided when its ``cfg:`` section resolves a guided stage (an enabled section
    must; a disabled one guides only the requests that ask), or when it has no ``cfg:`` section
    and one stage whose kind accepts ``"conditionings"`` (``StageKind.accepts``; omni-qwen-image's
    ``diffusers``) with one ``on_finish`` input: then the section's defaults apply,
    disabled (only the requests that ask are guided, as ``QwenImagePipeline`` guides only with a
    negative prompt).
    """
    from omni_cfg.guide import Guide

    section = pipeline.sections.get(SECTION)
    if section is not None and not isinstance(section, CfgSection):
        return None
    section = section or CfgSection(enabled=False)
    kinds = conditioning_kinds(pipeline)
    target = guided_target(pipeline.config, section.stage, strict=False, guided_kinds=kinds)
    return GuidedPipeline(Guide(port, section, target)) if target is not None else None


# --- registration ---------------------------------------------------------------------------
@hookimpl
def omni_register_config_sections() -> Iterable[ConfigSection]:
    return [ConfigSection(SECTION, CfgSection, "classifier-free guidance (omni-cfg)")]


def _guidance(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError("the guidance scale must be a finite number >= 0")
    return value


@hookimpl
def omni_register_run_options() -> Iterable[RunOption]:
    # omni run PIPELINE --negative-prompt TEXT --guidance S: the request's override, on the
    # pipelines this plugin guides (either one asks for guidance; the other keeps the section's)
    return [
        RunOption(
            "negative-prompt",
            lambda text: {SECTION: {"negative_prompt": text}},
            help=f"Guidance's negative prompt (omni-cfg: extra['{SECTION}'].negative_prompt; "
            "the scale: --guidance, else the pipeline's).",
        ),
        RunOption(
            "guidance",
            lambda scale: {SECTION: {"guidance_scale": scale}},
            help=f"Guidance scale >= 0 (omni-cfg: extra['{SECTION}'].guidance_scale; 1: the "
            "negative prompt has no weight; default: the pipeline's).",
            parse=_guidance,
            metavar="FLOAT",
        ),
    ]


# --- which pipelines it takes part in ----------------------------------------------------------
@hookimpl
def omni_applies_to(pipeline: PipelineView) -> bool:
    # Asked only for pipelines without a cfg: section (those use the plugin anyway): guided
    # (the requests that ask) when they have one stage accepting conditionings (its kind's
    # capability, not its name) with one on_finish input.
    kinds = conditioning_kinds(pipeline)
    return guided_target(pipeline.config, None, strict=False, guided_kinds=kinds) is not None
