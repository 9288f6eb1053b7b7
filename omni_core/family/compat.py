"""The torchvision gap: what a Qwen2-VL-family model (Qwen2.5-Omni, Qwen3-Omni, ...) needs from
transformers when torchvision is missing (the family kit's compat shim).

Two things fail without torchvision (see docs/models.md):

* vLLM's Qwen2-VL family (and so the Qwen omni models) imports ``smart_resize`` from
  ``transformers.models.qwen2_vl.image_processing_qwen2_vl``, a module that imports torchvision at
  its top. The import happens in vLLM's model-inspection *subprocess* too, so the fix must be
  process-wide and start-up-time: :func:`install` is run by ``shim/sitecustomize.py``, which every
  Python process with that directory on ``PYTHONPATH`` imports at start-up.
* ``Qwen2_5OmniProcessor`` (like ``Qwen3OmniMoeProcessor``) needs a video processor, and every
  transformers video processor needs torchvision. :class:`StubVideoProcessor` stands in: it
  carries the sizes vLLM and the processor read, and refuses to process a video.

:func:`install` does nothing when torchvision is importable, and is idempotent. It imports nothing
heavy: a ``sys.meta_path`` finder serves the alias module and patches ``processing_utils`` when
(and if) something imports them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SHIM_DIR = Path(__file__).with_name("shim")  # put on PYTHONPATH: its sitecustomize installs us
_ALIASED = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
_PIL_MODULE = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl"
_PROCESSING = "transformers.processing_utils"
_VIDEO_KEYS = ("patch_size", "temporal_patch_size", "merge_size", "size")


def needed() -> bool:
    """True when torchvision cannot be imported (then the shim is needed)."""
    return importlib.util.find_spec("torchvision") is None


class _StubVideoProcessorBase:
    """Stands in for ``Qwen2VLVideoProcessor`` without torchvision: sizes only, no videos.

    Built from the ``video_processor`` entry of ``processor_config.json`` (or keyword arguments);
    ``to_dict()`` gives them back, so a processor saves and loads through it unchanged. The
    class used is :data:`StubVideoProcessor` (this plus transformers' ``PushToHubMixin``, made on
    first use so that importing this module imports no transformers).
    """

    model_input_names = ["pixel_values_videos", "video_grid_thw"]
    _auto_class = None

    def __init__(self, **config: Any) -> None:
        from transformers.processing_utils import VideosKwargs

        self.valid_kwargs = VideosKwargs
        config.setdefault("video_processor_type", "Qwen2VLVideoProcessor")
        config.setdefault("patch_size", 14)
        config.setdefault("temporal_patch_size", 2)
        config.setdefault("merge_size", 2)
        config.setdefault("size", {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28})
        self._config = dict(config)
        for key, value in config.items():
            setattr(self, key, value)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike[str], subfolder: str = "", **_: Any
    ) -> Any:
        path = Path(pretrained_model_name_or_path, subfolder, "processor_config.json")
        config = json.loads(path.read_text()).get("video_processor", {}) if path.is_file() else {}
        return cls(**config)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._config)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "video input needs torchvision, which is not installed (the family kit's compat shim "
            "serves images and audio only)"
        )

    def __repr__(self) -> str:
        return f"StubVideoProcessor({self._config})"


_STUB: type[Any] | None = None


def stub_video_processor_class() -> type[Any]:
    """The stub video processor class (``PushToHubMixin`` makes processors serialize it)."""
    global _STUB
    if _STUB is None:
        from transformers.utils import PushToHubMixin

        _STUB = type(
            "StubVideoProcessor",
            (_StubVideoProcessorBase, PushToHubMixin),
            {"__module__": __name__, "__qualname__": "StubVideoProcessor"},
        )
    return _STUB


def __getattr__(name: str) -> Any:  # ``compat.StubVideoProcessor``, made on first use
    if name == "StubVideoProcessor":
        return stub_video_processor_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _patch_processing_utils(module: ModuleType) -> None:
    """Let processors hold a :class:`StubVideoProcessor` and load one as their video processor."""
    mixin = module.ProcessorMixin
    if getattr(mixin.check_argument_for_proper_class, "_omni_family", False):
        return
    original = mixin.check_argument_for_proper_class

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if isinstance(argument, _StubVideoProcessorBase):
            return type(argument)
        return original(self, argument_name, argument)

    check_argument_for_proper_class._omni_family = True  # type: ignore[attr-defined]
    mixin.check_argument_for_proper_class = check_argument_for_proper_class
    mapping = module.MODALITY_TO_AUTOPROCESSOR_MAPPING
    names = dict(type(mapping)._MAPPING_NAMES)
    names["video_processor"] = (__name__, "StubVideoProcessor")
    mapping._MAPPING_NAMES = names  # the instance's own table wins over the class's


class _AliasLoader(importlib.abc.Loader):
    """Serves the torchvision image-processor module as the PIL one (same ``smart_resize``)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        pil = importlib.import_module(_PIL_MODULE)
        module.__dict__.update(
            {k: v for k, v in vars(pil).items() if not k.startswith("__") or k == "__all__"}
        )
        module.Qwen2VLImageProcessor = pil.Qwen2VLImageProcessorPil  # type: ignore[attr-defined]


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real module, then patches it."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        _patch_processing_utils(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _ALIASED:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader())
        if fullname != _PROCESSING:
            return None
        for finder in sys.meta_path:  # the real spec, from the finders after us
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def installed() -> bool:
    """Whether the shim is installed in this process."""
    return _FINDER in sys.meta_path


def install(force: bool = False) -> bool:
    """Install the shim in this process when torchvision is missing (``force``: regardless).

    Returns whether it is installed. Modules imported before the call are patched now too.
    """
    if not (force or needed()):
        return False
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    if _PROCESSING in sys.modules:
        _patch_processing_utils(sys.modules[_PROCESSING])
    return True


# What a pipeline's stage ``env`` carries: found where the replica starts (omni-core expands
# ``{package:NAME}``), so a pipeline's YAML names no machine path. Harmless with torchvision
# installed (the sitecustomize installs nothing then).
PORTABLE_PYTHONPATH = "{package:omni_core.family}/shim"


def pythonpath_entry() -> str:
    """The directory to prepend to a child process's ``PYTHONPATH`` (its sitecustomize installs
    the shim at start-up)."""
    return str(SHIM_DIR)
