"""``omni config validate``: every problem of a file at once.

Resolving a pipeline stops at the first phase that fails: the file's fields (pydantic), then
its structure (ids, edges, cycles), then what plugins registered (kinds, ``engine_args``,
sampling params, bridges). A user fixing a file would meet them over several rounds. When an
early phase fails, :func:`file_problems` also checks each stage against the registered kinds
(its ``kind``, ``engine_args`` and ``sampling_params``) as written, so one run lists them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from omni_core.config.pipeline import MAX_FILE_BYTES
from omni_core.config.resolve import _model_problems, is_existing_path, resolve_pipeline
from omni_core.errors import ConfigError, RequestError
from omni_core.sampling import SamplingParams

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.plugin.hooks import PluginHost


def file_problems(
    file: Path, host: PluginHost
) -> tuple[ResolvedPipeline | None, ConfigError | None]:
    """(the resolved pipeline, None) or (None, a ConfigError listing every problem found)."""
    target: Any = file if is_existing_path(file) else str(file)
    try:  # a dotted-path bridge is located, not imported
        return resolve_pipeline(target, host, import_code=False), None
    except ConfigError as exc:
        problems = list(exc.problems)
        first = exc
    if isinstance(target, Path):
        problems += [p for p in stage_problems(target, host) if p not in problems]
    error = ConfigError(problems)
    error.__cause__ = first
    return None, error


def stage_problems(file: Path, host: PluginHost) -> list[str]:
    """Each stage of ``file`` with a name, an id and a kind, checked against the registered kinds
    as resolving does (empty when the file is no YAML mapping with a list of stages)."""
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
        data = yaml.safe_load(raw.decode("utf-8")) if len(raw) <= MAX_FILE_BYTES else None
    except Exception:  # reported already by the resolution (unreadable, not YAML...)
        return []
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, list):
        return []
    kinds = host.stage_kinds()
    problems: list[str] = []
    for item in stages:
        if not isinstance(item, dict):
            continue
        name, sid, kind_name = item.get("name"), item.get("id"), item.get("kind")
        engine_args = item.get("engine_args", {})
        sampling = item.get("sampling_params", {})
        if not (isinstance(name, str) and type(sid) is int and isinstance(kind_name, str)):
            continue  # its fields are reported already
        label = f"{file}: stage '{name}' (id {sid})"
        if isinstance(sampling, dict):
            try:
                SamplingParams.from_mapping(sampling)
            except RequestError as exc:
                problems.append(f"{label}: {exc}")
        kind = kinds.get(kind_name)
        if kind is None:
            problems.append(
                f"{label}: field 'kind': unknown stage kind '{kind_name}' "
                f"(registered: {', '.join(sorted(kinds)) or 'none'})"
            )
        elif isinstance(engine_args, dict):
            try:
                kind.config_model.model_validate(engine_args, context={"import_code": False})
            except ValidationError as exc:
                problems.extend(_model_problems(exc, label, prefix="engine_args."))
    return problems
