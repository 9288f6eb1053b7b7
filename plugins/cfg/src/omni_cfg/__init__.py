"""omni-cfg: classifier-free guidance (CFG) as an omni-core plugin.

Each guided request (the *parent*) is admitted together with hidden *companion* requests (the
negative prompt, plus configured extra branches) that run through the AR stage feeding the guided
stage. The guided stage gets the whole bundle as weighted conditionings once every companion
delivered. omni-core finds this package through its entry point ``cfg`` (group
``omni_core.plugins``) → :mod:`omni_cfg.plugin`.
"""

from __future__ import annotations

from omni_cfg.errors import CfgError

__version__ = "0.1.0"
__all__ = ["CfgError", "__version__"]
