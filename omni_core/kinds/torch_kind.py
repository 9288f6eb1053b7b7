"""The ``torch`` stage kind: any torch / transformers engine, hosted in a process replica.

A stage names the function that builds its engine::

    kind: torch
    engine_args:
      engine: "my_plugin.tts:build"   # called in the replica's process
      model: tiny-qwen2.5-omni        # a registered model (built on first use), a dir, a hub id
      threads: 1
      env: {}
      options: {voice: Chelsie}       # anything JSON: the engine's own settings

In the replica's process the worker sets torch's threads, imports ``engine`` and calls it with
``{"model": <resolved path or id, or None>, "threads": n, "options": {...}}``; it returns a
:class:`~omni_core.stage.worker.WorkerEngine` (``add``, ``add_input``, ``abort``, ``rpc``,
``has_work``, ``step``, ``dead``, ``step_delay_s``). Everything a plugin needs to write one is
exported here: :class:`TorchStageEngine` (control RPCs, ``die``), ``StageOutput``,
``error_output`` (a request's own failure inside ``step``), ``RequestError`` (a 400 naming what
is wrong), ``default_plane()`` (the data plane large output arrays go through). An exception from
``add``/``add_input`` fails that request only (a ValueError: 400); one from ``step`` ends the
replica (catch what belongs to one request and return ``error_output``).

A plugin kind that hosts its own engine in a process replica (its own ``engine_args`` model)
builds the replica with :func:`process_client` and resolves its model argument with
:func:`resolve_model`, as the torch kind does. :func:`stage_model` tells a plugin's
orchestrator-side hooks (e.g. ``omni_admit_request``) which checkpoint a ``torch`` stage loads.

The engine's module is located when the pipeline is resolved (a module that cannot be found is a
config error naming ``engine_args.engine``) but imported only in the replica's process, so an
engine module may import torch at its top without the orchestrator paying for it; a missing
function is a start-up error naming it.
"""

from __future__ import annotations

import importlib
import json
import sys
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from omni_core.errors import PluginError, RequestError
from omni_core.kinds.vllm_kind import engine_process_client
from omni_core.kinds.worker_base import TorchStageEngine
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageContext
from omni_core.stage.dataplane import default_plane
from omni_core.stage.process import ProcessStageClient
from omni_core.stage.worker import WorkerEngine, error_output

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost

__all__ = [
    "RequestError",
    "StageOutput",
    "TorchArgs",
    "TorchStageEngine",
    "WorkerEngine",
    "build",
    "default_plane",
    "error_output",
    "make_torch_client",
    "process_client",
    "resolve_model",
    "stage_model",
]

ENGINE_METHODS = ("add", "add_input", "abort", "rpc", "has_work", "step")


class TorchArgs(BaseModel):
    """``engine_args`` of a ``torch`` stage."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(
        description="`pkg.mod:build`: called in the replica's process with "
        "`{model, threads, options}`; returns the WorkerEngine"
    )
    model: str | None = Field(
        default=None,
        description="a registered model's name (built on first use), a local directory or a "
        "hub id; passed to the engine resolved (unset: None)",
    )
    threads: int = Field(default=1, ge=1, description="torch/OpenMP threads of this replica")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables of the replica's process, over the inherited ones; "
        "a PYTHONPATH here is prepended to the inherited PYTHONPATH; '{package:NAME}' in a value "
        "becomes the directory of the installed package NAME when the replica starts",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="the engine's own settings (JSON values)"
    )
    output: Literal["ar", "whole"] | None = Field(
        default=None,
        description="`ar` (token by token: an abort gives the prefix, the default) or `whole` "
        "(one result: an abort is a whole-sample retry)",
    )
    start_timeout_s: float = Field(
        default=600.0, gt=0, description="seconds a replica may take to build its engine"
    )

    @field_validator("engine")
    @classmethod
    def _locatable(cls, value: str) -> str:
        module_name, sep, attr = value.partition(":")
        if not sep or not module_name or not attr.isidentifier():
            raise ValueError(f"'{value}' is not of the form 'pkg.module:function'")
        from omni_core.config.resolve import module_locatable  # no parent package is imported

        if not all(p.isidentifier() for p in module_name.split(".")):
            raise ValueError(f"'{value}' is not of the form 'pkg.module:function'")
        if not module_locatable(module_name):
            raise ValueError(f"cannot import '{value}': no module named '{module_name}'")
        module = sys.modules.get(module_name)  # already imported here: check the function too
        if module is not None and not callable(getattr(module, attr, None)):
            raise ValueError(f"'{value}': module '{module_name}' has no callable '{attr}'")
        return value

    @field_validator("options")
    @classmethod
    def _json(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"options must be JSON values: {exc}") from None
        return value


# id(stage config) -> the model its replicas were given (entries leave with the config)
_STAGE_MODELS: dict[int, str | None] = {}


def resolve_model(name_or_path: str, where: StageContext | PluginHost) -> str:
    """A stage's model argument as its engine loads it: a model registered with the plugins of
    ``where`` (a stage-kind factory's ``context``, or a plugin host) becomes its directory under
    their settings' ``cache_dir`` (built first if missing); a local path or a hub id is returned
    as given. Call it on the orchestrator side (a stage-kind factory), not per request."""
    from omni_core.models import ModelResolver

    if isinstance(where, StageContext):
        return where.resolve_model(name_or_path)
    if callable(getattr(where, "models", None)) and hasattr(where, "settings"):  # a PluginHost
        return ModelResolver(where, Path(where.settings.cache_dir)).resolve(name_or_path)
    raise PluginError(
        f"resolve_model({name_or_path!r}, {where!r}): pass the stage's StageContext (or a "
        "PluginHost), not a cache directory: models resolve against the engine's plugins"
    )


def process_client(
    stage: Any,
    replica: int,
    context: StageContext,
    config: dict[str, Any],
    threads: int,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float = 600.0,
) -> ProcessStageClient:
    """One process replica of ``stage`` hosting a plugin's engine (a stage-kind factory's
    answer): ``config["factory"]`` (``"pkg.module:function"``) is called in the replica's
    process with ``config`` (JSON values) and returns the
    :class:`~omni_core.stage.worker.WorkerEngine`. ``threads`` pins torch/OpenMP threads,
    ``env`` is laid over the inherited environment (a PYTHONPATH is prepended), stderr goes to
    the stage's log, and a replica not ready within ``start_timeout_s`` fails to start."""
    return engine_process_client(
        stage, replica, context, config, threads, env=env, start_timeout_s=start_timeout_s
    )


def stage_model(stage: Any) -> str | None:
    """The model a ``torch`` stage's replicas load (its ``engine_args.model`` resolved: a
    directory or a hub id), recorded when its first replica was built in this process; None
    before that or when the stage names no model. ``stage`` is the stage's config, as hooks see
    it (``pipeline.stages[i]``)."""
    return _STAGE_MODELS.get(id(stage))


def _remember_model(stage: Any, model: str | None) -> None:
    key = id(stage)
    if key not in _STAGE_MODELS:
        weakref.finalize(stage, _STAGE_MODELS.pop, key, None)
    _STAGE_MODELS[key] = model


def make_torch_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    args = TorchArgs.model_validate(stage.engine_args)
    model = context.resolve_model(args.model) if args.model else None
    _remember_model(stage, model)
    config = {
        "factory": "omni_core.kinds.torch_kind:build",
        "engine": args.engine,
        "model": model,
        "threads": args.threads,
        "options": args.options,
        "stage_name": stage.name,
    }
    return process_client(
        stage, replica, context, config, args.threads, args.env, args.start_timeout_s
    )


def build(config: dict[str, Any]) -> WorkerEngine:
    """In the replica's process: pin torch's threads, then build the stage's engine."""
    import torch

    torch.set_num_threads(config["threads"])
    path = config["engine"]
    module_name, _, attr = path.partition(":")
    factory = getattr(importlib.import_module(module_name), attr, None)
    if not callable(factory):
        raise TypeError(f"engine '{path}': module '{module_name}' has no callable '{attr}'")
    engine = factory(
        {"model": config["model"], "threads": config["threads"], "options": config["options"]}
    )
    missing = [m for m in ENGINE_METHODS if not callable(getattr(engine, m, None))]
    if missing:
        raise TypeError(
            f"engine '{path}' returned {type(engine).__name__}, which lacks {', '.join(missing)} "
            "(a WorkerEngine: subclass omni_core.kinds.torch_kind.TorchStageEngine)"
        )
    return engine
