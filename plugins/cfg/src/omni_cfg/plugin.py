"""The hook implementations omni-core loads (entry point ``cfg`` → this module).

Cheap to import: it is imported whenever a plugin manager is built. One :class:`Guide` per
orchestrator (per :class:`~omni_core.views.OrchestratorPort`) holds the state; an orchestrator
whose pipeline is not guided gets none, and every hook returns at once for it. Only the public
API: the hooks' ``request`` views and ``port``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from omni_cfg.config import SECTION, CfgSection, guided_target
from omni_core import hookimpl
from omni_core.plugin.types import (
    Admission,
    ConfigSection,
    ForwardGate,
    RunOption,
)

if TYPE_CHECKING:
    from omni_cfg.guide import Guide
    from omni_cfg.tracker import Tracker
    from omni_core.outputs import ErrorInfo, StageOutput
    from omni_core.sampling import SamplingParams
    from omni_core.views import OrchestratorPort, PipelineView, RequestView

OMNI_PLUGIN_API_VERSION = 2

_guides: weakref.WeakKeyDictionary[OrchestratorPort, Guide | None] = weakref.WeakKeyDictionary()


def guide_of(port: OrchestratorPort) -> Guide | None:
    """The orchestrator's Guide, built on first use; None when its pipeline is not guided.

    A pipeline is guided when its ``cfg:`` section resolves a guided stage (an enabled section
    must; a disabled one guides only the requests that ask), or when it has no ``cfg:`` section
    and one ``diffusers`` stage with one ``on_finish`` input: then the section's defaults apply,
    disabled (only the requests that ask are guided, as ``QwenImagePipeline`` guides only with a
    negative prompt).
    """
    try:
        return _guides[port]
    except KeyError:
        pass
    from omni_cfg.guide import Guide

    config = port.pipeline.config
    section = port.pipeline.sections.get(SECTION)
    guide = None
    if section is None or isinstance(section, CfgSection):
        section = section or CfgSection(enabled=False)
        target = guided_target(config, section.stage, strict=False)
        if target is not None:
            guide = Guide(port, section, target)
    _guides[port] = guide
    return guide


def tracker_of(port: OrchestratorPort) -> Tracker | None:
    guide = guide_of(port)
    return guide.tracker if guide is not None else None


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
    # (the requests that ask) when they have one diffusers stage with one on_finish input.
    return guided_target(pipeline.config, None, strict=False) is not None


# --- request lifecycle ------------------------------------------------------------------------
@hookimpl
def omni_background_tasks(port: OrchestratorPort) -> Iterable[Callable[[], Awaitable[None]]]:
    guide = guide_of(port)
    return [guide.reaper] if guide is not None else []


@hookimpl
def omni_admit_request(
    request_id: str, request: RequestView, params: dict[int, SamplingParams], port: OrchestratorPort
) -> Admission | None:
    guide = guide_of(port)
    return guide.admit(request_id, params, request.request_id) if guide is not None else None


@hookimpl
def omni_request_admitted(request: RequestView, port: OrchestratorPort) -> None:
    guide = guide_of(port)
    if guide is not None:
        guide.admitted(request)


@hookimpl
def omni_intercept_stage_output(
    request: RequestView, stage_id: int, output: StageOutput, port: OrchestratorPort
) -> Any:
    guide = guide_of(port)
    if guide is not None:
        guide.on_output(request, stage_id, output)
    return None  # never consumes: the companion's run finishes normally


@hookimpl
def omni_forward_gate(request_id: str, stage_id: int, port: OrchestratorPort) -> ForwardGate | None:
    guide = guide_of(port)
    return guide.gate(request_id, stage_id) if guide is not None else None


@hookimpl
def omni_expand_abort(request_ids: list[str], port: OrchestratorPort) -> Iterable[str]:
    guide = guide_of(port)
    return guide.abort_targets(request_ids) if guide is not None else ()


@hookimpl
def omni_request_terminal(
    request_id: str, finish_reason: str, error: ErrorInfo | None, port: OrchestratorPort
) -> None:
    guide = guide_of(port)
    if guide is not None:
        guide.terminal(request_id, finish_reason, error)
