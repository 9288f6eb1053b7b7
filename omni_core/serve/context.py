"""What every route of one app shares: the engine, its first stage, the guards.

:func:`omni_core.serve.app.create_app` builds one :class:`ServeContext` and hands it to each
resource's router (:mod:`omni_core.serve.routes`); the request checks every OpenAI route makes
(the model's name, the modalities, the sampling fields over the stages' defaults, vLLM's own
checks) live here, once.

The heavy steps of a request (decoding and validating its JSON, rendering the chat template,
decoding its media, tokenizing, encoding a whole response's audio or images) run in worker
threads (:data:`off_loop`), never on the server's event loop: a large request does not stall
other routes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from omni_core.chat import ChatMessage, TextPart
from omni_core.config.settings import OmniSettings
from omni_core.serve.bodies import check_json_media_type, decode_json, parse_body
from omni_core.serve.connections import Drain
from omni_core.serve.errors import ApiError
from omni_core.serve.metrics import OmniMetrics
from omni_core.serve.responses import Extras
from omni_core.serve.runs import Admission
from omni_core.serve.tools import load_parser

off_loop = asyncio.to_thread  # the heavy steps of a request: in a worker thread


def prompt_chars(messages: list[ChatMessage]) -> int:
    """Characters of prompt text in a chat (string contents and text parts)."""
    total = 0
    for message in messages:
        if isinstance(message.content, str):
            total += len(message.content)
        elif message.content is not None:
            total += sum(len(p.text) for p in message.content if isinstance(p, TextPart))
    return total


def check_prompt_chars(chars: int, limit: int, param: str) -> None:
    if chars > limit:
        raise ApiError(
            400,
            f"'{param}': {chars} characters of prompt text; this server takes at most {limit} "
            "per request (OMNI_MAX_PROMPT_CHARS)",
            param=param,
            code="prompt_too_long",
        )


def request_id_of(request: Request, body: Any) -> str | None:
    """The caller's name for the request, as vLLM's server takes it: the ``X-Request-Id`` header,
    else the body's ``request_id``; the response's id is ``chatcmpl-``/``cmpl-`` and it."""
    return request.headers.get("x-request-id") or body.request_id


def with_request_id(response: Response, request: Request) -> Response:
    """The caller's ``X-Request-Id`` echoed on the response (vLLM's request-id headers)."""
    rid = request.headers.get("x-request-id")
    if rid is not None:
        response.headers["X-Request-Id"] = rid
    return response


def extras_of(body: Any) -> Extras:
    return Extras(
        token_ids=bool(body.return_token_ids), prompt_logprobs=body.prompt_logprobs is not None
    )


@dataclass
class ServeContext:
    """One app's engine handle, settings and guards, and the checks its routes share."""

    engine: Any
    settings: OmniSettings
    metrics: OmniMetrics
    admission: Admission
    drain: Drain
    model_id: str
    stages: dict[Any, Any]
    first_stage: Any
    offered: set[str]
    answers_requests: bool
    renderer: Any  # the first stage's prompt renderer; None for an engine without requests
    tool_parser: Any
    parser_where: str
    # the plugins' routes (filled once they are mounted): where a request-less model is offered
    plugin_paths: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, engine: Any, metrics: OmniMetrics, max_inflight: int) -> ServeContext:
        stages = engine.pipeline.stages
        first_stage = stages[min(stages)]
        # An engine kind without a request API (``generate``) is served only by its plugins'
        # routes.
        answers_requests = callable(getattr(engine, "generate", None))
        renderer = engine.prompt_renderer if answers_requests else None  # loads a tokenizer once
        parser_name = getattr(renderer, "tool_call_parser", None)
        tool_parser = load_parser(parser_name, first_stage.name) if parser_name else None
        parser_where = f"stage '{first_stage.name}': " + (
            f"'{parser_name}'" if parser_name else "none set"
        )
        return cls(
            engine=engine,
            settings=engine.settings,
            metrics=metrics,
            admission=Admission(max_inflight),
            drain=Drain(),
            model_id=engine.pipeline.config.name,
            stages=stages,
            first_stage=first_stage,
            offered={s.config.final_output_type for s in stages.values() if s.config.final_output},
            answers_requests=answers_requests,
            renderer=renderer,
            tool_parser=tool_parser,
            parser_where=parser_where,
        )

    @property
    def stage_name(self) -> str:
        return str(self.first_stage.name)

    def check_model(self, model: Any) -> None:
        model_id = self.model_id
        if model != model_id:
            raise ApiError(
                404,
                f"The model '{model}' does not exist (this server: '{model_id}')",
                param="model",
                code="model_not_found",
            )
        if not self.answers_requests:
            where = ", ".join(self.plugin_paths) or "no other route"
            raise ApiError(
                400,
                f"model '{model_id}' (engine '{self.engine.pipeline.config.engine}') does not "
                f"answer single requests; this server offers it at: {where}",
                param="model",
                code="unsupported_endpoint",
            )

    def stage_params(
        self,
        overrides: dict[str, Any],
        extra: dict[str, Any] | None = None,
        later: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        """The request's fields over the first stage's pipeline defaults, ``later`` (a chat's
        ``sampling_params``: later stages' fields by name) over theirs, and its request-level
        ``extra`` (the voice) in every stage's params, validated now."""
        if not overrides and not extra and not later:
            return None
        first = self.first_stage.name
        stage_names = {s.name for s in self.stages.values()}
        given: dict[str, Any] = {first: overrides} if overrides else {}
        for name, fields in (later or {}).items():
            if name == first or name not in stage_names:
                raise ApiError(
                    400,
                    f"'sampling_params.{name}': not a later stage of model '{self.model_id}' "
                    f"(its later stages: {', '.join(sorted(stage_names - {first}))}; "
                    "the first stage's fields are the request's own)",
                    param="sampling_params",
                )
            given[name] = fields
        params = given or None  # each merged over its stage's defaults by the engine
        if extra:
            return self.engine.request_params(params, extra=extra)
        self.engine.stage_params(params)  # RequestError (a 400) before anything starts
        return params

    def with_vllm_extras(
        self, body: Any, overrides: dict[str, Any], implied: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The request's vLLM sampling extras in the first stage's ``extra["vllm"]`` (over its
        pipeline defaults there, and over ``implied``: what its tools imply); a first stage of
        another kind cannot honour them: a 400."""
        extras = {**(implied or {}), **body.vllm_extras()}
        if not extras:
            return overrides
        first_stage = self.first_stage
        kind = first_stage.config.kind
        if kind != "vllm":
            name = body.vllm_extra_names()[0]
            raise ApiError(
                400,
                f"'{name}' is a vLLM sampling field; the first stage '{first_stage.name}' of "
                f"model '{self.model_id}' is of kind '{kind}', which does not take it",
                param=name,
            )
        extra = dict(first_stage.config.sampling_params.get("extra") or {})
        vllm = {**extra.get("vllm", {}), **overrides.get("extra", {}).get("vllm", {}), **extras}
        return {**overrides, "extra": {**extra, "vllm": vllm}}

    def check_as_vllm(self, body: Any) -> None:
        """vLLM 0.32's own request checks that omni's stages would not make: an output budget
        beyond the context (``max_tokens`` up to it still clamps to what the prompt leaves, as
        in vLLM), and ``n`` > 1 with greedy sampling on a vllm first stage."""
        wanted, limit = body.max_output_tokens(), getattr(self.renderer, "max_model_len", None)
        if wanted is not None and limit is not None and wanted > limit:
            param = (
                "max_completion_tokens"
                if getattr(body, "max_completion_tokens", None)
                else ("max_tokens")
            )
            raise ApiError(
                400,
                f"{param}={wanted} cannot be greater than max_model_len={limit}. Please request "
                "fewer output tokens.",
                param=param,
            )
        config = self.first_stage.config
        if body.n > 1 and config.kind == "vllm":
            temperature = body.temperature
            if temperature is None:
                temperature = config.sampling_params.get("temperature", 1.0)
            if temperature < 1e-5:  # vLLM's _SAMPLING_EPS
                raise ApiError(
                    400, f"n must be 1 when using greedy sampling, got {body.n}.", param="n"
                )

    def check_modalities(self, modalities: list[str]) -> None:
        """Every modality asked for is some final stage's output type, else a 400 saying why."""
        missing = [m for m in modalities if m not in self.offered]
        if missing:
            finals = ", ".join(
                f"'{s.name}' ({s.config.final_output_type})"
                for s in self.stages.values()
                if s.config.final_output
            )
            raise ApiError(
                400,
                f"modalities {modalities!r}: model '{self.model_id}' cannot produce "
                f"{' or '.join(missing)}: no final stage of the pipeline outputs it (final "
                f"stages: {finals})",
                param="modalities",
            )

    async def body_of(self, request: Request, model: type[Any]) -> Any:
        raw = await request.body()  # read first: the guard's size and time limits apply
        check_json_media_type(request)
        depth = self.settings.max_json_depth
        return await off_loop(lambda: parse_body(model, decode_json(raw, depth)))
