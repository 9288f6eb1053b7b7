"""``Guide``: CFG for one orchestrator — admission, gate, delivery, terminals and the reaper.

Everything here runs on the orchestrator's loop (the hooks that call it fire there), so it needs
no locks. It uses only the core's public API: ``Admission``/``Companion``, ``ForwardGate``, the
hooks' request views and the port's ``request``, ``release_forward``,
``fail``, ``spawn`` and ``loop``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from omni_cfg.config import (
    NEGATIVE,
    SECTION,
    CfgSection,
    Options,
    Target,
    check_work,
    request_options,
)
from omni_cfg.errors import CfgError
from omni_cfg.tracker import Bundle, Tracker
from omni_core import ErrorInfo
from omni_core.plugin import Admission, Companion, ForwardGate

if TYPE_CHECKING:
    from omni_core import SamplingParams, StageOutput
    from omni_core.plugin import OrchestratorPort, RequestView

logger = logging.getLogger(__name__)

DELIVERED = ("stop", "length")  # finish reasons of a companion that delivered its output


def companion_suffix(role: str) -> str:
    return f"#cfg-{role}"


class Guide:
    def __init__(self, port: OrchestratorPort, section: CfgSection, target: Target):
        self.port = port
        self.section = section
        self.target = target
        self.tracker = Tracker()
        self._wake = asyncio.Event()
        # n of a request is its first stage's (as the orchestrator reads it)
        self.first_stage = port.pipeline.config.topological_order()[0].id

    # --- admission ----------------------------------------------------------------------------
    def admit(
        self,
        request_id: str,
        params: dict[int, SamplingParams],
        caller_id: str | None = None,
        prompt: Any = None,
    ) -> Admission | None:
        """The companions of run ``request_id``; errors name the caller's id (``caller_id``: a
        parallel-sampling child's request). With ``share_media``, a request ``prompt`` carrying
        ``multi_modal_data`` gives each companion ``{"prompt": text, "multi_modal_data": ...}``."""
        caller_id = caller_id or request_id
        options = request_options(self.section, params, caller_id)
        if options is None:
            return None
        first = params.get(self.first_stage)
        n = first.n if first is not None else 1
        check_work(options, n, self.port.settings.max_n, caller_id)
        companion_params = self._companion_params(options, params, caller_id)
        prompts: dict[str, Any] = {NEGATIVE: options.negative_prompt} | {
            b.name: b.prompt for b in options.branches
        }
        media = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
        if self.section.share_media and media:
            prompts = {r: {"prompt": p, "multi_modal_data": media} for r, p in prompts.items()}
        parent_weight, weights = options.weights()
        companions = tuple(
            Companion(
                suffix=companion_suffix(role),
                prompt=prompt,
                sampling_params=companion_params,
                metadata={SECTION: {"parent": request_id, "role": role}},
                final_stage=self.target.source,
            )
            for role, prompt in prompts.items()
        )
        roles = {request_id + c.suffix: role for c, role in zip(companions, prompts, strict=True)}
        tag = {
            "roles": roles,
            "parent_weight": parent_weight,
            "weights": weights,
            "timeout_s": options.timeout_s,
        }
        return Admission(companions=companions, tags={SECTION: tag})

    def _companion_params(
        self, options: Options, params: dict[int, SamplingParams], request_id: str
    ) -> dict[int, SamplingParams] | None:
        if not options.companion_params:
            return None
        from omni_core import SamplingParams

        try:
            return {
                sid: SamplingParams.from_mapping(
                    {**_as_dict(p), **options.companion_params},
                    f"extra['{SECTION}'].companion_params",
                )
                for sid, p in params.items()
            }
        except Exception as exc:
            raise CfgError(f"request '{request_id}': {exc}") from None

    def admitted(self, run: RequestView) -> None:
        """Register a parent (its tag lists its companions) or one of its companions."""
        tag = run.tags.get(SECTION)
        if not isinstance(tag, dict):
            return
        if "roles" in tag:
            self.tracker.register_parent(
                Bundle(
                    parent_id=run.run_id,
                    roles=dict(tag["roles"]),
                    parent_weight=tag["parent_weight"],
                    weights=dict(tag["weights"]),
                    timeout_s=tag["timeout_s"],
                )
            )
        elif "parent" in tag:
            self.tracker.register_companion(run.run_id, tag["parent"])

    # --- delivery and the gate ----------------------------------------------------------------
    def on_output(self, request: RequestView, stage_id: int, output: StageOutput) -> None:
        """Only a companion's finished output of its last stage is its processed output."""
        if stage_id != self.target.source or not output.finished or output.error is not None:
            return
        if self.tracker.parent_of(request.run_id) is None:
            return
        parent_id = self.tracker.deliver(request.run_id, request.stages[stage_id].result)
        if parent_id is not None:
            self.port.release_forward(parent_id, self.target.stage)

    def gate(self, request_id: str, stage_id: int) -> ForwardGate | None:
        if stage_id != self.target.stage:
            return None
        bundle = self.tracker.bundles.get(request_id)
        if bundle is None:
            return None
        if not bundle.complete:
            if self.tracker.defer(request_id, self.port.loop.time()):
                self._wake.set()
            logger.debug("cfg: %s deferred, waiting for %s", request_id, bundle.missing)
            return ForwardGate(defer=True)
        self.tracker.undefer(request_id)
        return ForwardGate(transform=lambda prompt: self._combine(request_id, prompt))

    def _combine(self, request_id: str, prompt: Any) -> dict[str, Any]:
        """The bundle as weighted conditionings (non-destructive: a re-forward gets it again)."""
        bundle = self.tracker.bundles.get(request_id)
        if bundle is None or not bundle.complete:
            raise CfgError(f"request '{request_id}': its guidance bundle was lost")
        stage = self.port.pipeline.stages[self.target.stage]
        run = self.port.request(request_id)
        if run is None:
            raise CfgError(f"request '{request_id}' ended while its guidance was combined")
        conditionings = [conditioning(prompt, bundle.parent_weight)]
        for companion_id, role in bundle.roles.items():
            item = conditioning(
                stage.bridge([bundle.outputs[companion_id]], None, run.params[self.target.stage]),
                bundle.weights[role],
            )
            if not item.get("tokens", True):
                raise CfgError(
                    f"request '{request_id}': lost bundle: companion '{companion_id}' delivered "
                    "no usable output"
                )
            conditionings.append(item)
        return {"conditionings": conditionings}

    # --- terminals ----------------------------------------------------------------------------
    def abort_targets(self, request_ids: list[str]) -> list[str]:
        extra: list[str] = []
        for rid in request_ids:
            bundle = self.tracker.bundles.get(rid)
            if bundle is not None:
                extra.extend(c for c in bundle.roles if self.tracker.parent_of(c) is not None)
        return extra

    def terminal(self, request_id: str, finish_reason: str, error: ErrorInfo | None) -> None:
        parent_id = self.tracker.parent_of(request_id)
        if parent_id is not None:
            delivered = self.tracker.delivered(request_id, parent_id)
            self.tracker.forget_companion(request_id)
            if not delivered and finish_reason != "shutdown":
                reason = error.message if error is not None else finish_reason
                self._fail(
                    parent_id,
                    ErrorInfo(
                        type="CfgCompanionError",
                        message=f"request '{parent_id}': guidance companion '{request_id}' "
                        f"ended before delivering its output ({reason})",
                        status_code=error.status_code if error is not None else 500,
                        retryable=True,
                    ),
                )
            return
        self.tracker.cleanup_parent(request_id)

    def _fail(self, parent_id: str, error: ErrorInfo) -> None:
        run = self.port.request(parent_id)
        if run is not None and not run.terminal:
            self.port.spawn(self.port.fail(parent_id, self.target.stage, error), "omni-cfg-fail")

    # --- the reaper ---------------------------------------------------------------------------
    async def reaper(self) -> None:
        """Fail parents deferred past their deadline. Sleeps until the next deadline or until a
        new one is armed; never polls."""
        loop = self.port.loop
        while True:
            self._wake.clear()
            deadline = self.tracker.next_deadline()
            if deadline is None:
                await self._wake.wait()
                continue
            delay = deadline - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
                continue
            for parent_id in self.tracker.pop_expired(loop.time()):
                await self._expire(parent_id)

    async def _expire(self, parent_id: str) -> None:
        bundle = self.tracker.bundles.get(parent_id)
        run = self.port.request(parent_id)
        if bundle is None or run is None or run.terminal:
            return
        logger.warning("cfg: %s timed out waiting for %s", parent_id, bundle.missing)
        await self.port.fail(
            parent_id,
            self.target.stage,
            ErrorInfo(
                type="CfgTimeoutError",
                message=f"request '{parent_id}': guidance companions {bundle.missing} did not "
                f"deliver within {bundle.timeout_s:g}s (cfg.timeout_s); request and companions "
                "aborted",
                status_code=504,
                retryable=True,
            ),
        )


def conditioning(prompt: Any, weight: float) -> dict[str, Any]:
    """One weighted conditioning from a bridge's output: token ids (``{"tokens": [...]}``), or the
    fields of a bridge that gives a mapping (e.g. ``{"prompt_embeds": array}``: a stage guided
    on embeddings, such as omni-qwen-image's ``diffusers`` kind)."""
    if isinstance(prompt, dict) and "conditionings" not in prompt and "weight" not in prompt:
        return {**prompt, "weight": weight}
    return {"tokens": _tokens(prompt), "weight": weight}


def _tokens(prompt: Any) -> list[int]:
    if isinstance(prompt, list):
        return [int(t) for t in prompt]
    if isinstance(prompt, str):
        return list(prompt.encode())
    if prompt is None:
        return []
    raise CfgError(f"cannot guide a stage whose bridge gives {type(prompt).__name__}")


def _as_dict(params: SamplingParams) -> dict[str, Any]:
    import msgspec

    return msgspec.structs.asdict(params)
