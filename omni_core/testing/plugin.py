"""Built-in plugin of the testing kit: registers the ``scripted`` stage kind."""

from __future__ import annotations

from collections.abc import Iterable

from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.plugin.types import StageKind

OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_core.testing.scripted import make_scripted_client
    from omni_core.testing.scripted_core import ScriptedArgs

    return [
        StageKind(
            name="scripted",
            client_factory=make_scripted_client,
            config_model=ScriptedArgs,
            description="deterministic fake engine with fault injection (testing kit)",
        )
    ]
