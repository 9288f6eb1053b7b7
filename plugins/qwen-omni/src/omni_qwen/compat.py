"""omni-qwen's torchvision shim: the family kit's (:mod:`omni_core.family.compat`), kept under
this name for pipelines and scripts that put ``{package:omni_qwen}/shim`` on ``PYTHONPATH``."""

from __future__ import annotations

from pathlib import Path

from omni_core.family.compat import install, installed, needed, stub_video_processor_class

SHIM_DIR = Path(__file__).with_name("shim")  # its sitecustomize installs the kit's shim
PORTABLE_PYTHONPATH = "{package:omni_qwen}/shim"

__all__ = [
    "PORTABLE_PYTHONPATH",
    "SHIM_DIR",
    "install",
    "installed",
    "needed",
    "pythonpath_entry",
    "stub_video_processor_class",
]


def pythonpath_entry() -> str:
    """The directory to prepend to a child process's ``PYTHONPATH`` (its sitecustomize installs
    the shim at start-up)."""
    return str(SHIM_DIR)
