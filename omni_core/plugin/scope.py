"""Which plugins take part in a pipeline's requests (decided once per engine start).

A plugin's *per-pipeline* hooks (:data:`PER_PIPELINE_HOOKS`: its per-pipeline object,
admission, output interception, forward gates, abort expansion, background tasks, shutdown work
and the observers) are called only for the pipelines the plugin takes part in; the object its
``omni_pipeline_plugin`` returns takes part in that one pipeline's hooks only. Every other
hook (``omni_addhooks``, the ``omni_register_*`` registrations, ``omni_applies_to`` itself and
hooks plugins add) stays global.

A plugin takes part in a pipeline when, in this order (the first that holds is the reason):

1. the pipeline lists it in ``requires_plugins``;
2. the pipeline uses something it registered: a config section, a stage kind, a bridge (by
   name) or the engine kind;
3. its ``omni_applies_to(pipeline)`` impl returns True (False or None: no);
4. it implements no ``omni_applies_to`` and registers nothing a pipeline can use (no stage kind,
   bridge, engine kind or config section): a policy or observer plugin (metrics, tracing,
   authentication), which takes part everywhere.

A plugin that registers something pipelines can use, and is not used by this one, stays out of
it unless its ``omni_applies_to`` says otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.errors import PluginError
from omni_core.plugin.manager import OBSERVERS
from omni_core.plugin.types import Bridge, ConfigSection, EngineKind, StageKind

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.plugin.hooks import PluginHost

# Hooks called only for the plugins that take part in the pipeline (subset hook callers).
PIPELINE_PLUGIN = "omni_pipeline_plugin"
PER_PIPELINE_HOOKS: tuple[str, ...] = (
    PIPELINE_PLUGIN,
    "omni_admit_request",
    "omni_intercept_stage_output",
    "omni_forward_gate",
    "omni_expand_abort",
    "omni_background_tasks",
    "omni_shutdown",
    *OBSERVERS,
)
APPLIES_TO = "omni_applies_to"

# Registrations a pipeline can use: (hook, type, how a pipeline uses it).
_USABLE: tuple[tuple[str, type[Any], str], ...] = (
    ("omni_register_config_sections", ConfigSection, "config section"),
    ("omni_register_stage_kinds", StageKind, "stage kind"),
    ("omni_register_bridges", Bridge, "bridge"),
    ("omni_register_engine_kinds", EngineKind, "engine kind"),
)


def used_names(pipeline: ResolvedPipeline) -> dict[str, set[str]]:
    """What the pipeline uses, by registration hook: section keys, kinds, bridge names, engine."""
    config = pipeline.config
    return {
        "omni_register_config_sections": set(config.sections),
        "omni_register_stage_kinds": {stage.kind for stage in config.stages},
        "omni_register_bridges": {s.bridge for s in config.stages if s.bridge is not None},
        "omni_register_engine_kinds": {config.engine},
    }


def active_plugins(host: PluginHost, pipeline: ResolvedPipeline) -> dict[str, str]:
    """Plugin name → why it takes part in ``pipeline`` (the rules above), in registration order.

    Raises :class:`~omni_core.errors.PluginError` naming the plugin when its ``omni_applies_to``
    raises or returns something other than a bool or None.
    """
    pm = host.pm
    config = pipeline.config
    names = [name for name, _ in pm.global_plugins()]
    reasons: dict[str, str] = {}
    for name in config.requires_plugins:
        if name in names:
            reasons.setdefault(name, "listed in requires_plugins")
    usable: set[str] = set()  # plugins that register something a pipeline can use
    used = used_names(pipeline)
    for hook, expected, what in _USABLE:
        for item_name, (plugin, _) in host.registered(hook, expected).items():
            usable.add(plugin)
            if item_name in used[hook]:
                reasons.setdefault(plugin, f"its {what} '{item_name}' is used")
    deciders = {pm.get_name(impl.plugin) for impl in getattr(pm.hook, APPLIES_TO).get_hookimpls()}
    for name in names:
        if name in reasons:
            continue
        if name in deciders:
            if _applies_to(host, name, pipeline):
                reasons[name] = "its omni_applies_to returned True"
        elif name not in usable:
            reasons[name] = "registers nothing a pipeline uses: takes part everywhere"
    return {name: reasons[name] for name in names if name in reasons}


def _applies_to(host: PluginHost, name: str, pipeline: ResolvedPipeline) -> bool:
    """One plugin's answer, through pluggy: a subset caller holding that plugin's impls only."""
    pm = host.pm
    others = [p for n, p in pm.list_name_plugin() if p is not None and n != name]  # objects too
    caller = pm.subset_hook_caller(APPLIES_TO, remove_plugins=others)
    try:
        answers = caller(pipeline=pipeline)
    except Exception as exc:
        raise PluginError(
            f"plugin '{name}' failed in {APPLIES_TO} for pipeline '{pipeline.config.name}': "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for answer in answers:
        if not isinstance(answer, bool):
            raise PluginError(
                f"plugin '{name}': {APPLIES_TO} returned {type(answer).__name__}, "
                "expected bool or None"
            )
    return any(answers)
