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

The engine's module is located when the pipeline is resolved (a module that cannot be found is a
config error naming ``engine_args.engine``) but imported only in the replica's process, so an
engine module may import torch at its top without the orchestrator paying for it; a missing
function is a start-up error naming it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from omni_core.errors import RequestError
from omni_core.kinds.vllm_kind import engine_process_client
from omni_core.kinds.worker_base import TorchStageEngine
from omni_core.outputs import StageOutput
from omni_core.stage.client import StageContext
from omni_core.stage.dataplane import default_plane
from omni_core.stage.process import ProcessStageClient
from omni_core.stage.worker import WorkerEngine, error_output

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
        "a PYTHONPATH here is prepended to the inherited PYTHONPATH",
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
        try:
            found = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError) as exc:  # a parent package that fails to import
            raise ValueError(f"cannot import '{module_name}': {exc}") from None
        if not found:
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


def make_torch_client(stage: Any, replica: int, context: StageContext) -> ProcessStageClient:
    from omni_core.models import resolve_model

    args = TorchArgs.model_validate(stage.engine_args)
    model = resolve_model(args.model, context.settings.cache_dir) if args.model else None
    config = {
        "factory": "omni_core.kinds.torch_kind:build",
        "engine": args.engine,
        "model": model,
        "threads": args.threads,
        "options": args.options,
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
