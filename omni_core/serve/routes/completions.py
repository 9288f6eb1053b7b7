"""``POST /v1/completions``: one prompt or several (strings or token ids), a run per prompt,
echo with the prompt's logprobs, whole or streamed."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from omni_core.chat import RenderedPrompt
from omni_core.serve import streams
from omni_core.serve.context import (
    ServeContext,
    check_prompt_chars,
    extras_of,
    off_loop,
    request_id_of,
    with_request_id,
)
from omni_core.serve.errors import ApiError
from omni_core.serve.protocol import CompletionRequest
from omni_core.serve.responses import completion_response, gather
from omni_core.serve.runs import Run, all_of, start_runs


def completions_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    engine, metrics, model_id = ctx.engine, ctx.metrics, ctx.model_id
    first_stage, stage_name = ctx.first_stage, ctx.stage_name

    @router.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await ctx.body_of(request, CompletionRequest)
        ctx.check_model(body.model or model_id)
        renderer = ctx.renderer
        assert renderer is not None
        if "text" not in ctx.offered:
            raise ApiError(400, f"model '{model_id}' does not produce text", param="model")
        ctx.check_as_vllm(body)
        prompts = body.prompts()
        ctx.admission.check_fits(len(prompts), "prompt")
        chars = sum(len(p) for p in prompts if isinstance(p, str))
        check_prompt_chars(chars, ctx.settings.max_prompt_chars, "prompt")

        def render() -> list[RenderedPrompt]:
            return [
                renderer.encode(p, body.add_special_tokens)
                if isinstance(p, str)
                else renderer.tokens(p)
                for p in prompts
            ]

        rendered = await off_loop(render)
        overrides = body.overrides()
        echoes: list[tuple[str, list[int]]] | None = None
        if body.echo:
            echoes = [
                (r.text, list(r.prompt) if isinstance(r.prompt, list) else []) for r in rendered
            ]
            if body.logprobs is not None:  # the prompt's logprobs, from the stage (vLLM's)
                extra = dict(first_stage.config.sampling_params.get("extra") or {})
                vllm = {**extra.get("vllm", {}), "prompt_logprobs": body.logprobs}
                overrides["extra"] = {**extra, "vllm": vllm}
        params = ctx.stage_params(ctx.with_vllm_extras(body, overrides))
        runs = start_runs(request, engine, ctx.admission, rendered, params, ctx.drain)
        rid = request_id_of(request, body)
        extras = extras_of(body)
        prompt_tokens = sum(r.num_tokens or 0 for r in rendered)
        n = body.n
        if body.stream:
            firsts = await all_of(runs, Run.start)
            runs[0].siblings = runs[1:]  # its stream's end closes them all
            if echoes is not None:  # a stage without prompt logprobs: a 400, not a broken stream
                try:
                    for first, echo in zip(firsts, echoes, strict=True):
                        streams.prompt_logprobs([first], len(echo[1]), body.logprobs, stage_name)
                except ApiError:
                    await runs[0].close()
                    raise
            chunks = streams.completion_chunks(
                streams.interleave([r.outputs(f) for r, f in zip(runs, firsts, strict=True)], n),
                model=model_id,
                n=n * len(runs),
                logprobs=body.logprobs,
                decode=renderer.decode,
                echo=[e for e in echoes for _ in range(n)] if echoes is not None else None,
                usage_prompt=prompt_tokens if body.include_usage else None,
                stage_name=stage_name,
                on_done=metrics.count_usage,
                request_id=rid,
                continuous_usage=body.continuous_usage,
                extras=extras,
            )
            return with_request_id(runs[0].stream(chunks), request)
        every = await all_of(runs, Run.collect)
        choices = []
        echoed: list[tuple[str, list[int], list[Any]] | None] = []
        for i, outputs in enumerate(every):
            choices += gather(outputs, n, prompt=extras.token_ids or extras.prompt_logprobs)
            if echoes is not None:
                ids = echoes[i][1]
                steps = streams.prompt_logprobs(outputs, len(ids), body.logprobs, stage_name)
                echoed += [(echoes[i][0], ids, steps)] * n
        response = completion_response(
            choices,
            model=model_id,
            prompt_tokens=prompt_tokens,
            echo=echoed or None,
            logprobs=body.logprobs,
            decode=renderer.decode,
            extras=extras,
            request_id=rid,
        )
        metrics.count_usage(response["usage"])
        return with_request_id(JSONResponse(response), request)

    return router
