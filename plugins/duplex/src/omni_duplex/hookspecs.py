"""The duplex plugin's own hook (added to omni-core's manager through ``omni_addhooks``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from omni_core.plugin import hookspec

if TYPE_CHECKING:
    from omni_duplex.model import DuplexModelSpec


@hookspec
def omni_duplex_register_models() -> Iterable[DuplexModelSpec]:
    """Provide duplex model plugs (how a pipeline's stages serve a session), by name.

    A pipeline selects one with ``duplex: {model: NAME}``. Merged; duplicate names conflict.
    """
    return ()
