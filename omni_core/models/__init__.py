"""Models built locally by name (no model hub is ever contacted).

Plugins register them with ``omni_register_models`` (:class:`~omni_core.plugin.types.ModelSpec`);
the core's own tiny demo models are registered by the built-in plugin the same way.
Names resolve against the host that was passed down (an engine's stage kinds get a
:class:`ModelResolver` bound to the engine's host on their ``StageContext``), never against a host
built from the environment here: settings and disabled plugins set in code are what resolution
sees. Without a host only the core's own demo models are known.
``omni models build`` builds them into ``$OMNI_CACHE_DIR/models/NAME-VERSION``; an engine whose
``engine_args.model`` names one builds it on first use. Builds are atomic: built aside, then
renamed. The core's checksums are committed in ``checksums.json``; a plugin commits its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from omni_core import progress
from omni_core.errors import ConfigError

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost
    from omni_core.plugin.types import ModelSpec

logger = logging.getLogger(__name__)

MODELS = ("tiny-thinker", "tiny-talker", "tiny-vocoder")  # the core's own
VERSION = "v1"  # of the core's own


def models_root(cache_dir: Path) -> Path:
    return Path(cache_dir) / "models"


def model_path(name: str, cache_dir: Path, version: str = VERSION) -> Path:
    return models_root(cache_dir) / f"{name}-{version}"


def tree_hashes(path: Path) -> dict[str, str]:
    """SHA-256 of every file under ``path`` by relative POSIX path (the build marker left out)."""
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != ".complete"
    }


def committed_checksums() -> dict[str, dict[str, str]]:
    """The core's demo models' committed checksums, by model name."""
    text = resources.files("omni_core.models").joinpath("checksums.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return,unused-ignore]


def registered_models(host: PluginHost | None = None) -> dict[str, ModelSpec]:
    """Every model ``host``'s plugins register; without a host, the core's own demo models only
    (no plugin manager is built here: a caller that wants plugins' models passes its host)."""
    if host is not None:
        return host.models()
    return {spec.name: spec for spec in core_models()}


_DESCRIPTIONS = {
    "tiny-thinker": "tiny Llama-style text LM (random weights; vllm kind)",
    "tiny-talker": "tiny Llama-style codec LM (random weights; vllm kind)",
    "tiny-vocoder": "codec tokens to sinusoid audio (vocoder kind)",
}


def _build_demo(name: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        from omni_core.models.build import build_model

        build_model(name, out)

    return build


def core_models() -> list[ModelSpec]:
    """The core's own demo models (what the built-in plugin registers)."""
    from omni_core.plugin.types import ModelSpec

    checksums = committed_checksums()
    return [
        ModelSpec(name, _build_demo(name), VERSION, checksums.get(name), _DESCRIPTIONS[name])
        for name in MODELS
    ]


def build_into(spec: ModelSpec, target: Path) -> Path:
    """Build ``spec`` into ``target`` unless it is complete there: built in ``target.building``,
    marked complete, then renamed (a failed or interrupted build never leaves ``target``)."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".building")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    logger.info("building model %s in %s", spec.name, target)
    progress.report("model", f"model {spec.name}", f"building in {target}")
    try:
        spec.build(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress.report("model", f"model {spec.name}", "built", done=True)
    (staging / ".complete").write_text("ok\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def ensure_model(name: str, cache_dir: Path, host: PluginHost | None = None) -> Path:
    """The registered model's directory, built first if it is missing."""
    specs = registered_models(host)
    spec = specs.get(name)
    if spec is None:
        raise ConfigError([f"unknown model '{name}' (registered: {', '.join(sorted(specs))})"])
    return build_into(spec, model_path(name, cache_dir, spec.version))


def resolve_model(name_or_path: str, cache_dir: Path, host: PluginHost | None = None) -> str:
    """A model argument: a registered model's name (built if needed), else returned as given (a
    local path or a hub id, for the engine to load)."""
    spec = registered_models(host).get(name_or_path)
    if spec is None:
        return name_or_path
    return str(build_into(spec, model_path(spec.name, cache_dir, spec.version)))


@dataclass(frozen=True)
class ModelResolver:
    """Model names resolved against one plugin host's registrations, built under ``cache_dir``
    (what a stage kind's :class:`~omni_core.stage.client.StageContext` carries as ``models``)."""

    host: PluginHost
    cache_dir: Path

    def specs(self) -> dict[str, ModelSpec]:
        """The models the host's (enabled) plugins register, by name."""
        return registered_models(self.host)

    def resolve(self, name_or_path: str) -> str:
        """A registered model's directory (built first if missing), else ``name_or_path`` as
        given (a local path or a hub id, for the engine to load)."""
        return resolve_model(name_or_path, self.cache_dir, self.host)

    def ensure(self, name: str) -> Path:
        """A registered model's directory, built first if missing (ConfigError when ``name`` is
        not registered)."""
        return ensure_model(name, self.cache_dir, self.host)
