"""``PipelineConfig``: the stage graph, parsed from YAML or built in Python.

Structural checks (fields, ids, edges, cycles, final stages) happen here and need nothing else;
checks against what plugins registered (kinds, bridges, engine_args, sections) happen in
:mod:`omni_core.config.resolve`. Every problem becomes one readable line naming the file, the stage
and the field.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from omni_core.errors import ConfigError

OutputType = Literal["text", "audio", "image", "tokens", "latent"]
PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]

# Sane bounds: a typo (``replicas: 1e8``) is an error, never a machine-sized allocation.
MAX_STAGES = 1024
MAX_REPLICAS = 1024
MAX_CHUNK = 65_536
MAX_BACKOFF_S = 3600.0
MAX_FILE_BYTES = 16 * 1024 * 1024

FiniteNonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class InputEdge(BaseModel):
    """An upstream stage feeding this one. ``on_finish``: start when upstream finished;
    ``stream``: open at the first chunk of ``chunk`` upstream outputs, then feed the rest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: int = Field(description="id of the upstream stage")
    mode: Literal["on_finish", "stream"] = Field(
        default="on_finish",
        description="`on_finish`: the bridge runs once, when the upstream stage finished the "
        "request; `stream`: the downstream request opens once `chunk` upstream outputs arrived, "
        "then every further `chunk` is fed to it as it comes (it must be the stage's only input)",
    )
    chunk: int = Field(
        default=1,
        ge=1,
        le=MAX_CHUNK,
        description="`stream` edges: upstream outputs per forwarded chunk (the last one may be "
        "shorter)",
    )


class RestartPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Literal["no", "on-failure"] = Field(
        default="no",
        description='`no`: a dead replica stays dead (write it quoted, `"no"`: a bare `no` is '
        "YAML's false); `on-failure`: a new replica is started in its slot (requests that died "
        "with it are not replayed)",
    )
    max_restarts: int = Field(default=3, ge=0, description="restarts per stage, at most")
    backoff_s: float = Field(
        default=0.5,
        ge=0,
        le=MAX_BACKOFF_S,
        allow_inf_nan=False,
        description="seconds between a replica's death and its restart",
    )


class StageResources(BaseModel):
    """Where a replica may run under ``runtime: ray`` (ignored by the ``local`` runtime).

    ``num_cpus``/``num_gpus``: Ray resources each replica reserves (unset: Ray's actor default,
    which reserves no CPU once placed). ``node_ip`` pins replicas to one node (a placement hint);
    ``custom`` asks for custom resources declared with ``ray start --resources``; ``strategy``
    ``SPREAD`` spreads a stage's replicas over nodes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: FiniteNonNegative | None = Field(
        default=None, description="CPUs each replica reserves (unset: Ray's actor default)"
    )
    num_gpus: FiniteNonNegative | None = Field(
        default=None, description="GPUs each replica reserves (fractions share a GPU)"
    )
    node_ip: str | None = Field(
        default=None, description="pin the replicas to the Ray node with this IP address"
    )
    custom: dict[str, FiniteNonNegative] = Field(
        default_factory=dict,
        description="custom Ray resources per replica (declared with `ray start --resources`)",
    )
    strategy: Literal["DEFAULT", "SPREAD"] = Field(
        default="DEFAULT",
        description="`DEFAULT`: Ray's placement; `SPREAD`: spread the stage's replicas over nodes",
    )


class StageConfig(BaseModel):
    """One stage of a pipeline file, as validated (its fields: docs/pipelines.md)."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(description="unique stage id; `inputs` refer to stages by id")
    name: str = Field(
        min_length=1, description="unique stage name (logs, metrics, per-stage timings)"
    )
    kind: str = Field(description="registered stage kind (`omni stages`)")
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="arguments of the stage kind, checked by the kind"
    )
    inputs: list[InputEdge] = Field(
        default_factory=list,
        description="upstream stages feeding this stage: a stage id (an `on_finish` edge) or an "
        "edge mapping; none: the stage gets the request's prompt",
    )
    bridge: str | None = Field(
        default=None,
        description="how upstream results become this stage's input: a registered bridge name "
        "or a dotted path to a callable (`pkg.mod:func`); unset: the bridge the stage's kind "
        "declares (`audio` for a kind taking audio chunks), else the default bridge",
    )
    final_output: bool = Field(
        default=False, description="the stage's outputs are returned to the caller"
    )
    final_output_type: OutputType = Field(
        default="text",
        description="the `output_type` of a final stage's outputs, which requests select with "
        "`modalities`: `text`, `audio` (audio chunks), `image`, `tokens` (token ids), `latent`",
    )
    replicas: int = Field(
        default=1, ge=1, le=MAX_REPLICAS, description="engine replicas (requests spread over them)"
    )
    sampling_params: dict[str, Any] = Field(
        default_factory=dict,
        description="the stage's default sampling parameters (a request's own override them)",
    )
    restart: RestartPolicy = Field(
        default_factory=RestartPolicy, description="what happens when a replica dies"
    )
    resources: StageResources = Field(
        default_factory=StageResources,
        description="placement of the replicas under `runtime: ray`",
    )

    @field_validator("inputs", mode="before")
    @classmethod
    def _edges(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [
                {"stage": v} if isinstance(v, int) and not isinstance(v, bool) else v for v in value
            ]
        return value


class PipelineConfig(BaseModel):
    """A pipeline: ``name``, ``stages`` and optional ``engine`` (engine kind, default ``turn``),
    ``requires_plugins``, and plugin-registered sections (kept in ``model_extra``).

    ``runtime`` hosts the stage replicas: ``local`` (in-process or OS processes) or ``ray`` (one
    Ray actor per replica, see docs/distributed.md); ``ray_address`` names the cluster to join
    (default: ``RAY_ADDRESS``, else a local Ray started for the engine).
    """

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="the pipeline's name (the served model id)")
    engine: str = Field(default="turn", description="registered engine kind")
    runtime: Literal["local", "ray"] = Field(
        default="local",
        description="`local`: replicas in-process or in OS processes; `ray`: one Ray actor per "
        "replica",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster to join (default: `RAY_ADDRESS`, else a local Ray started for "
        "the engine)",
    )
    placement_group: PlacementStrategy | None = Field(
        default=None,
        description="`runtime: ray`: reserve every replica as one Ray placement group (a bundle "
        "per replica, from its stage's `resources`), placed with this strategy; start-up fails "
        "within `OMNI_STARTUP_TIMEOUT_S` when it cannot be placed; unset: each replica is placed "
        "on its own",
    )
    requires_plugins: list[str] = Field(
        default_factory=list, description="plugins that must be installed and enabled"
    )
    stages: list[StageConfig] = Field(
        max_length=MAX_STAGES, description="the stages, at least one with `final_output: true`"
    )
    source: str = Field(default="<python>", exclude=True)

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | Path) -> PipelineConfig:
        path = Path(path)
        try:
            with path.open("rb") as file:  # bounded: /dev/zero or a huge file is an error
                raw = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError([f"{path}: cannot read pipeline file: {reason}"]) from None
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError([f"{path}: pipeline file is larger than {MAX_FILE_BYTES} bytes"])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                [f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"]
            ) from None
        return cls.from_yaml_text(text, source=str(path))

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<string>") -> PipelineConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError([f"{source}{where}: invalid YAML: {problem}"]) from None
        except RecursionError:
            raise ConfigError([f"{source}: invalid YAML: nested too deeply"]) from None
        except ValueError as exc:  # a scalar YAML resolves but cannot build, e.g. 2024-13-45
            raise ConfigError([f"{source}: invalid YAML value: {exc}"]) from None
        if not isinstance(data, dict):
            raise ConfigError([f"{source}: a pipeline must be a mapping with 'name' and 'stages'"])
        return cls.from_dict(data, source=source)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> PipelineConfig:
        try:
            config = cls.model_validate({**data, "source": source})
        except ValidationError as exc:
            raise ConfigError(
                _readable(exc, data, source) + _raw_edge_problems(data, source)
            ) from None
        problems = config.structural_problems()
        if problems:
            raise ConfigError(problems)
        return config

    def derive(self, changes: dict[str, Any], source: str | None = None) -> PipelineConfig:
        """A new pipeline from this one with ``changes`` merged in, validated like a file.

        Mappings merge key by key (a ``None`` value removes the key); ``stages`` merge by ``id``
        (a change naming an existing id merges into that stage, a new id adds a stage); any other
        value replaces. Give the derived pipeline its own ``name``. ``source`` names it in
        errors (default ``<NAME derived from BASE>``)."""
        data = _merge(self.portable(), changes)
        if not isinstance(data.get("name"), str):
            raise ConfigError([f"{self.source}: derive: field 'name' must be a string"])
        where = source or f"<{data['name']} derived from {self.name}>"
        return PipelineConfig.from_dict(data, source=where)

    def portable(self) -> dict[str, Any]:
        """The config as plain JSON values (every field, its sections included): what
        ``omni pipelines show`` prints as YAML and :meth:`from_dict` reads back."""
        return self.model_dump(mode="json", exclude={"source"})

    # --- structure ----------------------------------------------------------------------------
    def stage_label(self, stage: StageConfig) -> str:
        return f"{self.source}: stage '{stage.name}' (id {stage.id})"

    def structural_problems(self) -> list[str]:
        problems: list[str] = []
        if not self.stages:
            return [f"{self.source}: field 'stages': a pipeline needs at least one stage"]
        ids: dict[int, StageConfig] = {}
        names: set[str] = set()
        for stage in self.stages:
            if stage.id in ids:
                problems.append(f"{self.stage_label(stage)}: field 'id': duplicate stage id")
            ids[stage.id] = stage
            if stage.name in names:
                problems.append(f"{self.stage_label(stage)}: field 'name': duplicate stage name")
            names.add(stage.name)
        for stage in self.stages:
            for edge in stage.inputs:
                if edge.stage not in ids:
                    problems.append(
                        f"{self.stage_label(stage)}: field 'inputs': unknown stage id {edge.stage}"
                    )
                elif edge.stage == stage.id:
                    problems.append(
                        f"{self.stage_label(stage)}: field 'inputs': stage feeds itself"
                    )
            if any(e.mode == "stream" for e in stage.inputs) and len(stage.inputs) > 1:
                problems.append(
                    f"{self.stage_label(stage)}: field 'inputs': a 'stream' edge must be the "
                    "stage's only input"
                )
        if self.placement_group is not None:
            for stage in self.stages:
                if stage.resources.strategy == "SPREAD":
                    problems.append(
                        f"{self.stage_label(stage)}: field 'resources.strategy': SPREAD places "
                        "replicas one by one, but 'placement_group' places them all: use "
                        "'placement_group: SPREAD' instead"
                    )
        if not any(s.final_output for s in self.stages):
            problems.append(f"{self.source}: field 'final_output': no stage has final_output: true")
        if not problems:
            cycle = self._find_cycle()
            if cycle:
                path = " -> ".join(str(i) for i in cycle)
                problems.append(
                    f"{self.source}: field 'inputs': the stage graph has a cycle {path}"
                )
        return problems

    def _find_cycle(self) -> list[int] | None:
        """A cycle's path (``[0, 1, 0]``) or None; iterative, so chains of any length are fine."""
        deps = {s.id: [e.stage for e in s.inputs] for s in self.stages}
        state: dict[int, int] = {}  # 1: on the current trail, 2: done
        for root in deps:
            if root in state:
                continue
            state[root] = 1
            trail, pending = [root], [iter(deps[root])]
            while trail:
                dep = next(pending[-1], None)
                if dep is None:
                    state[trail.pop()] = 2
                    pending.pop()
                elif state.get(dep) == 1:
                    return [*trail[trail.index(dep) :], dep]
                elif dep not in state:
                    state[dep] = 1
                    trail.append(dep)
                    pending.append(iter(deps[dep]))
        return None

    def stage(self, stage_id: int) -> StageConfig:
        for s in self.stages:
            if s.id == stage_id:
                return s
        raise KeyError(stage_id)

    @property
    def final_stage_ids(self) -> list[int]:
        return [s.id for s in self.topological_order() if s.final_output]

    def topological_order(self) -> list[StageConfig]:
        """Stages after their inputs; among ready stages, the one listed first (linear-ish)."""
        index = {s.id: i for i, s in enumerate(self.stages)}
        waiting = {s.id: len({e.stage for e in s.inputs}) for s in self.stages}
        feeds: dict[int, list[int]] = {}
        for stage in self.stages:
            for upstream in {e.stage for e in stage.inputs}:
                feeds.setdefault(upstream, []).append(stage.id)
        ready = [index[sid] for sid, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        order: list[StageConfig] = []
        while ready:
            stage = self.stages[heapq.heappop(ready)]
            order.append(stage)
            for downstream in feeds.get(stage.id, ()):
                waiting[downstream] -= 1
                if waiting[downstream] == 0:
                    heapq.heappush(ready, index[downstream])
        if len(order) != len(self.stages):  # pragma: no cover - structural_problems rejects cycles
            raise ConfigError([f"{self.source}: the stage graph has a cycle"])
        return order

    @property
    def sections(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif key == "stages" and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_stages(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _merge_stages(base: list[Any], changes: list[Any]) -> list[Any]:
    stages = list(base)
    index = {s.get("id"): i for i, s in enumerate(stages) if isinstance(s, dict)}
    for change in changes:
        i = index.get(change.get("id")) if isinstance(change, dict) else None
        if i is None:
            stages.append(change)
        else:
            stages[i] = _merge(stages[i], change)
    return stages


def _readable(exc: ValidationError, data: dict[str, Any], source: str) -> list[str]:
    problems = []
    stages_value = data.get("stages")
    raw_stages: list[Any] = stages_value if isinstance(stages_value, list) else []
    for err in exc.errors():
        loc = list(err["loc"])
        where = source
        if len(loc) >= 2 and loc[0] == "stages" and isinstance(loc[1], int):
            idx = loc[1]
            raw = raw_stages[idx] if idx < len(raw_stages) else {}
            raw = raw if isinstance(raw, dict) else {}
            label = f"stage '{raw['name']}'" if "name" in raw else f"stages[{idx}]"
            if "id" in raw:
                label += f" (id {raw['id']})"
            where = f"{source}: {label}"
            loc = loc[2:]
        field = ".".join(str(p) for p in loc) or "stages"
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"]
        problems.append(f"{where}: field '{field}': {msg}")
    return problems


def _raw_edge_problems(data: dict[str, Any], source: str) -> list[str]:
    """Unknown input ids, checked on the raw data when field validation already failed."""
    stages = data.get("stages")
    if not isinstance(stages, list):
        return []
    raw = [s for s in stages if isinstance(s, dict)]
    ids = {s.get("id") for s in raw if _is_int(s.get("id"))}
    problems = []
    for stage in raw:
        edges = stage.get("inputs")
        for edge in edges if isinstance(edges, list) else ():
            target = edge.get("stage") if isinstance(edge, dict) else edge
            if _is_int(target) and target not in ids:
                problems.append(
                    f"{source}: stage '{stage.get('name')}' (id {stage.get('id')}): "
                    f"field 'inputs': unknown stage id {target}"
                )
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
