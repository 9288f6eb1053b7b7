"""The hook implementations omni-core loads (entry point ``example`` → this module).

Keep this module cheap to import: omni-core imports it whenever a plugin manager is built (engine
start, every ``omni`` command). Heavier modules are imported inside the hooks that need them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from omni_core import hookimpl
from omni_core.plugin.types import Bridge, CliGroup, PipelineSpec, StageKind
from omni_example_plugin.stats import STATS

if TYPE_CHECKING:
    from omni_core.config.pipeline import PipelineConfig

# The plugin API version this plugin was written against; omni-core refuses to load a plugin
# whose version differs from its own PLUGIN_API_VERSION (a literal, on purpose).
OMNI_PLUGIN_API_VERSION = 2

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
    from omni_core.config.pipeline import PipelineConfig

    return PipelineConfig.from_dict(PIPELINE, source="<pipeline example-reverse>")


@hookimpl
def omni_register_pipelines() -> Iterable[PipelineSpec]:
    return [PipelineSpec("example-reverse", _load_pipeline, "mirror -> dedupe -> unmirror")]


@hookimpl
def omni_request_terminal(finish_reason: str) -> None:
    # An observer: it takes only the arguments it needs. It runs on the orchestrator thread
    # for every run that ends (requests, parallel-sampling children, companions): keep it cheap.
    STATS.record(finish_reason)


@hookimpl
def omni_register_cli_groups() -> Iterable[CliGroup]:
    from omni_example_plugin.cli import app

    return [CliGroup("example", app, "Commands of the example plugin.")]
