"""Registration helpers: the :class:`~omni_core.plugin.ModelSpec` of a tiny model and the
:class:`~omni_core.plugin.PipelineSpec` of a lazily built pipeline, each naming its builder as
``"module:function"`` so a family's ``plugin.py`` imports nothing heavy (the builder, torch and
transformers load only when the model is built or the pipeline asked for)::

    @hookimpl
    def omni_register_models():
        return [tiny_model("tiny-x", "omni_x.build:build", "v1", package="omni_x")]
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_core.errors import PluginError

if TYPE_CHECKING:
    from omni_core.plugin.types import ModelSpec, PipelineSpec

__all__ = ["lazy", "lazy_pipeline", "tiny_model"]


def lazy(target: str) -> Any:
    """The object ``"module:attribute"`` names, imported now; a malformed or missing target is a
    :class:`~omni_core.errors.PluginError` naming it."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise PluginError(f"{target!r} is not 'module:attribute'")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{target!r} cannot be imported: {exc}") from exc


def tiny_model(
    name: str,
    build: str | Callable[[Path], None],
    version: str,
    *,
    package: str | None = None,
    description: str = "",
) -> ModelSpec:
    """A tiny model built by ``build`` (``"module:function"`` imported on first build, or the
    function) into a cache directory per ``version``; ``package``: the package whose committed
    ``checksums.json`` holds the SHA-256 of every built file (None: the build is not checked)."""
    from omni_core.models.tiny import packaged_checksums
    from omni_core.plugin.types import ModelSpec

    def builder(out: Path) -> None:
        (lazy(build) if isinstance(build, str) else build)(out)

    checksums = packaged_checksums(package) if package is not None else None
    return ModelSpec(name, builder, version, checksums, description)


def lazy_pipeline(
    name: str, factory: str, description: str = "", *, default: bool = False
) -> PipelineSpec:
    """A pipeline whose config ``factory`` (``"module:function"``) builds, imported only when
    the pipeline is asked for. The factory is called with no argument, or with ``host=`` the
    :class:`~omni_core.plugin.PluginHost` resolving it when it has a parameter named ``host``
    (its other parameters keep their defaults)."""
    from omni_core.plugin.types import PipelineSpec

    def load(host: Any = None) -> Any:
        function = lazy(factory)
        if "host" in inspect.signature(function).parameters:
            return function(host=host)
        return function()

    return PipelineSpec(name, load, description, default)
