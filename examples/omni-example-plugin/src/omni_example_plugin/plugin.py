"""The hook implementations omni-core loads (entry point ``example`` → this module).

Keep this module cheap to import: omni-core imports it whenever a plugin manager is built (engine
start, every ``omni`` command). Heavier modules are imported inside the hooks that need them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from omni_core.plugin import Bridge, CliGroup, PipelineSpec, StageKind, hookimpl

if TYPE_CHECKING:
    from omni_core import PipelineConfig
    from omni_core.plugin import OrchestratorPort, PipelineView
    from omni_example_plugin.stats import OutcomeCounter

# The plugin API version this plugin was written against; omni-core refuses to load a plugin
# whose version it does not support (a literal, on purpose).
OMNI_PLUGIN_API_VERSION = 3

PIPELINE = {
    "name": "example-reverse",
    "requires_plugins": ["example"],
    "stages": [
        {
            "id": 0,
            "name": "mirror",
            "kind": "reverse",
            "final_output": True,
            "final_output_type": "text",
        },
        {
            "id": 1,
            "name": "unmirror",
            "kind": "reverse",
            "inputs": [0],
            "bridge": "dedupe",
            "final_output": True,
            "final_output_type": "tokens",
        },
    ],
}


@hookimpl
def omni_register_stage_kinds() -> Iterable[StageKind]:
    from omni_example_plugin.reverse import ReverseArgs, make_reverse_client

    return [
        StageKind(
            name="reverse",
            client_factory=make_reverse_client,
            config_model=ReverseArgs,
            description="streams the input's token ids back reversed (example plugin)",
            output_mode="ar",
        )
    ]


@hookimpl
def omni_register_bridges() -> Iterable[Bridge]:
    from omni_example_plugin.bridges import dedupe

    return [Bridge("dedupe", dedupe, "upstream token ids, runs of repeats collapsed")]


def _load_pipeline() -> PipelineConfig:
    from omni_core import PipelineConfig

    return PipelineConfig.from_dict(PIPELINE, source="<pipeline example-reverse>")


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [PipelineSpec("example-reverse", _load_pipeline, "mirror -> dedupe -> unmirror")]


@hookimpl
def omni_pipeline_plugin(pipeline: PipelineView, port: OrchestratorPort) -> OutcomeCounter:
    # The plugin's state for one pipeline (one engine): an object whose @hookimpl methods take
    # part in that pipeline's hooks only, unregistered when the engine shuts down.
    from omni_example_plugin.stats import OutcomeCounter

    return OutcomeCounter(pipeline.config.name)


@hookimpl
def omni_register_cli_groups() -> Iterable[CliGroup]:
    from omni_example_plugin.cli import app

    return [CliGroup("example", app, "Commands of the example plugin.")]
