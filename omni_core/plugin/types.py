"""Frozen dataclasses that plugins return from the registration hooks."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_core.errors import PluginError

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel

    from omni_core.config.pipeline import PipelineConfig, StageConfig
    from omni_core.plugin.hooks import PluginHost
    from omni_core.stage.client import StageClient, StageContext

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # part of a directory name
_FLAG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")  # a long option's name, without "--"


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(f"{kind} name {name!r} is invalid: use lowercase letters, digits, '-_.'")


StageClientFactory = Callable[["StageConfig", int, "StageContext"], "StageClient | Any"]


@dataclass(frozen=True, slots=True)
class StageKind:
    """A kind of stage engine (``kind:`` in a pipeline's stage).

    ``client_factory(stage_config, replica_index, context)`` builds one replica's client; it is
    called on the orchestrator thread. ``config_model`` validates the stage's ``engine_args``.
    ``output_mode`` is ``"ar"`` (token by token, abort yields the prefix) or ``"whole"`` (one
    result, abort is a whole-sample retry); an engine_args field ``output`` overrides it.
    ``renderer(stage_config, engine_args, context)``, for kinds whose engine tokenizes its
    prompt (``context``: the stage's :class:`~omni_core.stage.client.StageContext`), returns the
    :class:`~omni_core.chat.PromptRenderer` that renders chats and counts prompt tokens when the
    stage is a pipeline's first (called once per engine, in the caller's
    thread); without one, chats are rendered by :class:`~omni_core.chat.PlainRenderer`.

    Capabilities (what other code asks instead of probing the kind's name):

    * ``extras``: omni-core extras (``pip install 'omni-core[EXTRA]'``) its replicas need;
      ``omni run`` / ``omni serve`` name a missing one before any stage starts (exit 2);
    * ``accepts``: inputs it takes beyond a plain prompt, by capability name, e.g.
      ``"conditionings"`` (a ``{"conditionings": [...]}`` prompt of weighted conditionings, as a
      guidance plugin builds); a plugin looks for ``"conditionings" in stage.kind.accepts``;
    * ``bridge``: the registered bridge its stages need when they set no ``bridge:`` (a kind
      that takes audio chunks declares ``bridge="audio"``); ``None``: the default bridge;
    * ``produces``: what its outputs carry when that is fixed (``"text"``, ``"tokens"``,
      ``"audio"``, ``"image"``, ``"latent"``): a stage fed by one that produces neither text nor
      tokens, with the default bridge, is a config error naming the bridge to set.
    """

    name: str
    client_factory: StageClientFactory
    config_model: type[BaseModel]
    description: str = ""
    output_mode: str = "ar"
    renderer: Callable[[StageConfig, Any, Any], Any] | None = None
    extras: tuple[str, ...] = ()
    accepts: tuple[str, ...] = ()
    bridge: str | None = None
    produces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name("stage kind", self.name)
        if self.bridge is not None:
            _check_name(f"stage kind {self.name!r}: bridge", self.bridge)
        unknown = set(self.produces) - {"text", "tokens", "audio", "image", "latent"}
        if unknown:
            raise PluginError(
                f"stage kind {self.name!r}: produces {sorted(unknown)} unknown (use text, "
                "tokens, audio, image, latent)"
            )
        if self.output_mode not in ("ar", "whole"):
            raise PluginError(f"stage kind {self.name!r}: output_mode must be 'ar' or 'whole'")


@dataclass(frozen=True, slots=True)
class Bridge:
    """Turns upstream stage results into one downstream stage input (``bridge:`` in a stage).

    ``func(sources, original_prompt, params)`` gets one :class:`~omni_core.outputs.StageResult`
    per upstream stage (in ``inputs`` order) and returns the next prompt (token ids, str or dict),
    or ``None`` when there is nothing to forward yet.
    """

    name: str
    func: Callable[..., Any]
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("bridge", self.name)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """A named pipeline (``omni run NAME``). ``load`` builds its :class:`PipelineConfig`.

    ``load()`` takes no argument, or one: the :class:`~omni_core.plugin.hooks.PluginHost`
    resolving it (its ``settings``, what other plugins registered, and
    ``host.pipeline_config(OTHER)`` to derive from another registered pipeline: docs/plugins.md
    "Deriving a pipeline"). Call :meth:`config` (or ``host.pipeline_config(name)``), which passes
    the host when the factory takes it.

    ``default``: ``omni run`` with no PIPELINE runs this one (the core's own default, tiny-omni,
    when no registered pipeline is marked; two marked: ``omni run`` asks for a name)."""

    name: str
    load: Callable[..., PipelineConfig]
    description: str = ""
    default: bool = False

    def __post_init__(self) -> None:
        _check_name("pipeline", self.name)

    def config(self, host: PluginHost) -> PipelineConfig:
        """The pipeline's config: ``load(host)`` when the factory takes a parameter, else
        ``load()``."""
        import inspect

        try:
            params = list(inspect.signature(self.load).parameters.values())
        except (TypeError, ValueError):  # a callable without a signature: the old form
            params = []
        takes_host = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
        )
        return self.load(host) if takes_host else self.load()


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model built locally (``omni models build NAME``; ``engine_args.model: NAME``).

    ``build(directory)`` writes every file of the model into an empty ``directory``, offline and
    deterministically (it runs in the calling process, e.g. an engine's caller thread, and may
    import heavy libraries). The built model lives in ``$OMNI_CACHE_DIR/models/NAME-VERSION``:
    a new ``version`` is a new directory, so change it whenever the builder's output changes.
    ``checksums`` maps each file's path (relative, ``/``-separated) to its SHA-256, for
    ``omni models build --check``; None when the build is not byte-reproducible.
    """

    name: str
    build: Callable[[Path], None]
    version: str
    checksums: Mapping[str, str] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("model", self.name)
        if not isinstance(self.version, str) or not _VERSION.match(self.version):
            raise PluginError(f"model {self.name!r}: version {self.version!r} is invalid")


@dataclass(frozen=True, slots=True)
class EngineKind:
    """An engine class selected by a pipeline's ``engine:`` field (default ``turn``)."""

    name: str
    engine_class: type[Any]
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("engine kind", self.name)


@dataclass(frozen=True, slots=True)
class ConfigSection:
    """An extra top-level section of a pipeline file, validated by ``model``."""

    name: str
    model: type[BaseModel]
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("config section", self.name)


@dataclass(frozen=True, slots=True)
class CliGroup:
    """A typer app mounted as ``omni NAME ...``."""

    name: str
    app: Any
    help: str = ""

    def __post_init__(self) -> None:
        _check_name("CLI group", self.name)


@dataclass(frozen=True, slots=True)
class RunOption:
    """A flag ``--NAME VALUE`` of ``omni run PIPELINE``, accepted on the pipelines its plugin
    takes part in (a plugin's per-request options by name instead of ``--extra KEY=VALUE``).

    ``parse(text)`` turns the command line's text into the value (``str``, ``int``, ``float`` or
    any callable; a ValueError or TypeError is exit 2 naming the flag). ``to_extra(value)``
    returns the fields the flag sets in the request-level ``params.extra`` (every stage's); the
    mappings of the flags given are merged key by key into nested mappings, and two flags setting
    one field to different values is exit 2 naming both. ``metavar`` names the value in
    ``omni run PIPELINE --help``. Both callables run in the ``omni`` process, before any stage
    starts.
    """

    name: str
    to_extra: Callable[[Any], Mapping[str, Any]]
    help: str = ""
    parse: Callable[[str], Any] = str
    metavar: str = "TEXT"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _FLAG.match(self.name):
            raise PluginError(
                f"run option name {self.name!r} is invalid: the flag without '--', lowercase "
                "words joined by '-' (e.g. 'output-format')"
            )


@dataclass(frozen=True, slots=True)
class ServerRoute:
    """An HTTP/WebSocket route mounted by ``omni serve``; ``mount(app, engine)`` adds it."""

    name: str
    mount: Callable[[Any, Any], None]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A benchmark run by ``omni bench NAME`` (only when named: it is never in the default set).

    ``run(quick)`` returns the rows it measured (:class:`omni_core.bench.orchestration.Row`, each
    with its same-run baseline where one makes sense) and raises on a failed correctness check.
    """

    name: str
    run: Callable[[bool], Any]
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("benchmark", self.name)


@dataclass(frozen=True, slots=True)
class Companion:
    """An extra internal request admitted beside a caller's request (hidden from the caller).

    ``sampling_params``: one SamplingParams for every stage, a mapping stage id -> SamplingParams,
    or None (the request's own). ``final_stage``: the companion runs only the stages feeding this
    stage id (itself included) and ends there; None runs the request's whole plan.
    ``metadata`` becomes the companion run's ``tags``.
    """

    suffix: str
    prompt: Any
    sampling_params: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    final_stage: int | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``omni_admit_request`` adds to a request: companions and free-form tags."""

    companions: tuple[Companion, ...] = ()
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ForwardGate:
    """What ``omni_forward_gate`` says about forwarding a request to a stage.

    ``defer=True`` holds the forward until the plugin calls
    ``port.release_forward(request_id, stage_id)`` (the hook's ``OrchestratorPort``).
    ``extra_sources`` are appended to the bridge's sources when the forward happens.
    ``transform(prompt)`` rewrites the bridge's result (the next stage's prompt) before it is
    submitted; an exception in it fails the request like a failing bridge. Several plugins'
    transforms compose in ascending ``order``, ties by plugin name, never by registration order.
    On a ``stream`` edge the gate is asked when the target stage's request is about to open; its
    transform then rewrites every chunk fed to it.
    """

    defer: bool = False
    extra_sources: tuple[Any, ...] = ()
    transform: Callable[[Any], Any] | None = None
    order: int = 0
