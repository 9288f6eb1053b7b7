"""Errors of the CFG plugin (all derive from omni-core's OmniError)."""

from __future__ import annotations

from omni_core import OmniError


class CfgError(OmniError):
    """A guided request cannot be built or delivered (bad override, lost bundle)."""
